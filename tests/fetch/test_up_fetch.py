"""``shoal up`` fetches a manifest's ``hf://`` source once, before any engine starts, and stops with the Hub's
answer (exit 1) when it cannot; another kind of engine (a real llama-server) then serves the fetched file."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path
from unittest import mock

from fetch_harness import hub_env
from hub_standin import HubServer

from shoal.cli import main
from shoal.local.process import free_port

sys.path.insert(0, str(Path(__file__).parent.parent / "local"))
import openai
import pytest
from support.polling import eventually
from up_harness import UpProcess, manifest, write_manifest

from shoal.model_registry import resolve_model

REPO = Path(__file__).resolve().parents[2]


def test_up_stops_before_starting_anything_when_the_source_cannot_be_fetched(hub: HubServer, tmp_path: Path) -> None:
    file = write_manifest(tmp_path, manifest("hf://org/absent"))
    env = hub_env(hub) | {"SHOAL_MODEL_CACHE": str(tmp_path / "cache")}
    stderr = io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), redirect_stderr(stderr):
        status = main(["up", str(file), "--port", str(free_port()), "--no-tui", "--log-dir", str(tmp_path / "logs")])
    assert status == 1
    assert stderr.getvalue().startswith("shoal up: spec.model.source: hf://org/absent: 401 from the Hub")
    assert not (tmp_path / "logs").exists()  # no engine, no gateway


def test_a_llama_server_fleet_serves_the_gguf_up_fetched_from_the_hub(hub: HubServer, tmp_path: Path) -> None:
    binary = subprocess.run(
        [str(REPO / "hack/llama-server/build.sh"), "--path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(binary).is_file():
        pytest.skip(f"no llama-server at {binary} (run hack/llama-server/build.sh)")
    gguf = resolve_model("smollm2-135m").path
    hub.hub.add_repo("org/smol-gguf", {"README.md": b"# smol", gguf.name: gguf.read_bytes()})
    source = f"hf://org/smol-gguf/{gguf.name}"
    document = manifest(
        source,
        model={"source": source, "servedName": "smol"},
        engine={"kind": "llamacpp", "maxNumSeqs": 1, "maxModelLen": 512, "extraArgs": ["--no-repack"]},
        autoscaling={"enabled": False},
    )
    env = hub_env(hub) | {"SHOAL_MODEL_CACHE": str(tmp_path / "cache"), "SHOAL_LLAMA_SERVER": binary}
    (tmp_path / "logs").mkdir()
    with mock.patch.dict(os.environ, env):
        up = UpProcess(write_manifest(tmp_path, document), tmp_path / "logs")
    try:
        eventually(lambda: up.ready() == 1 and up.serving(), timeout=120, what="llama-server", detail=up.output)
        client = openai.OpenAI(base_url=up.url + "/v1", api_key="none", max_retries=0, timeout=60)
        reply = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=4, temperature=0)
        assert "Paris" in reply.choices[0].text
        assert dict(hub.hub.downloads) == {gguf.name: 1}, "fetched once, by shoal up, before the engine started"
    finally:
        up.kill_everything()
