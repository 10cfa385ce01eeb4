"""``shoal gateway`` as a process: flags wired through, requests proxied, and torch never loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.polling import eventually

from shoal.local import free_port

pytestmark = pytest.mark.timeout(120)


def test_shoal_gateway_serves_through_its_flags(fake_engines, tmp_path: Path) -> None:
    ((engine, server),) = fake_engines(1)
    keys = tmp_path / "keys.yaml"
    keys.write_text("tenants:\n  acme:\n    api_keys: [sk-cli]\n    max_concurrent: 4\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shoal.cli",
                "gateway",
                "--port",
                str(port),
                "--backend",
                server.url,
                "--api-keys",
                str(keys),
                "--policy",
                "least-load",
                "--tokenizer",
                "tiny=smollm2-135m",
                "--health-interval",
                "0.2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                return httpx.get(url + "/ready").status_code == 200
            except httpx.HTTPError:
                return False

        eventually(ready, 60, "shoal gateway /ready")
        response = httpx.post(
            url + "/v1/completions",
            json={"model": "tiny", "prompt": "hello", "max_tokens": 2},
            headers={"Authorization": "Bearer sk-cli"},
        )
        assert response.status_code == 200 and response.json()["engine"] == engine.name
        assert httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "x"}).status_code == 401
        assert 'policy="least-load"' in httpx.get(url + "/metrics").text
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_gateway_with_a_real_tokenizer_never_imports_torch() -> None:
    probe = (
        "import sys\n"
        "from shoal.gateway.app import create_app\n"
        "from shoal.gateway.cli import register\n"
        "from shoal.gateway.gateway import Gateway, GatewayConfig\n"
        "from shoal.gateway.discovery import static\n"
        "gateway = Gateway(GatewayConfig(), static([]))\n"
        "create_app(gateway)\n"
        "assert gateway.prompts.load('smollm2-135m') is not None\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')"
        " or m.split('.')[:2] in (['shoal', 'engine'], ['shoal', 'kernels'])))\n"  # shoal.engine_kinds is torch-free
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_failed_tokenizer_fetch_stops_the_gateway_with_the_stores_answer(tmp_path: Path) -> None:
    """``--fetch-record`` (the operator's gateway pods): the record ``shoal fetch-model`` left is read at start."""
    record = tmp_path / "fetch-record.json"
    record.write_text('{"source": "hf://org/gated", "error": "401 Unauthorized: set HF_TOKEN"}\n')
    argv = [sys.executable, "-m", "shoal.cli", "gateway", "--backend", "http://127.0.0.1:9", "--port", "0"]
    result = subprocess.run([*argv, "--fetch-record", f"gated={record}"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"--fetch-record {record}: fetching hf://org/gated failed: 401 Unauthorized: set HF_TOKEN" in result.stderr
