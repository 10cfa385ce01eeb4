"""API keys never reach a log: a ``shoal gateway`` process at debug level, sent right, wrong and malformed keys,
writes none of them; and the session-wide scan (``support.secret_scan``) does find a key where one is."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from support.secret_scan import SecretCatcher, scan_log_files, secrets_in

from shoal.local.process import LocalProcess, shoal_command

pytestmark = pytest.mark.timeout(120)


def test_the_scan_finds_a_key_in_a_file_and_in_a_record(tmp_path: Path) -> None:
    planted = tmp_path / "engine.log"
    planted.write_text("request from sk-acme-123 with Authorization: Bearer abcdef12345\n")
    assert len(scan_log_files(tmp_path)) == 2
    planted.unlink()  # the session's own scan must not find it
    catcher = SecretCatcher()
    catcher.handle(logging.makeLogRecord({"msg": "tenant key %s", "args": ("sk-leaked",)}))
    assert catcher.found and secrets_in("FLAG: --node-cidr-mask-size=0") == []


def test_a_gateway_at_debug_level_logs_no_key(fake_engine, tmp_path: Path) -> None:
    _, server = fake_engine
    keys = tmp_path / "keys.yaml"
    keys.write_text("tenants:\n  acme:\n    api_keys: [sk-secret-acme]\n    requests_per_minute: 1\n")
    gateway = LocalProcess(
        shoal_command(
            "gateway",
            "--backend",
            server.url,
            "--api-keys",
            str(keys),
            "--log-level",
            "debug",
            "--health-interval",
            "0.2",
        ),
        tmp_path / "gateway.log",
    )
    url, log = gateway.url, gateway.log_path
    try:
        gateway.wait_ready(timeout=60)
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
        for authorization in ("Bearer sk-secret-acme", "Bearer sk-secret-wrong", "sk-secret-bare", "Basic sk-x"):
            for _ in range(2):  # the second with the right key is over its quota: a 429 names the tenant only
                httpx.post(url + "/v1/completions", json=body, headers={"Authorization": authorization})
        httpx.get(url + "/v1/models", headers={"Authorization": "Bearer sk-secret-models"})
    finally:
        gateway.terminate()
        gateway.process.wait(timeout=10)
    text = log.read_text()
    assert '"status": 401' in text and '"status": 429' in text  # the requests were logged...
    assert scan_log_files(tmp_path) == []  # ...and no key with them
