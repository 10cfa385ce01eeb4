"""``shoal up`` with ``engine.kind: vllm``: each engine publishes its KV events on a free port of its own, written
beside its URL in the backends file the gateway follows (``URL kv-events=PORT``).

The engine is a stand-in for vLLM (a script that answers 200 on every path and prints the argv it was given):
what is checked is the command line and the backends file, not vLLM (``tests/gateway/test_vllm_kv_routing.py``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest
from up_harness import manifest, write_manifest

from shoal.engine_kinds.vllm import KV_EVENTS_FLAG
from shoal.gateway.discovery import read_backends
from shoal.local.fleet import EngineFleet
from shoal.local.manifest import load_manifest
from shoal.local.up import UpOptions, engine_launch, gateway_argv

STAND_IN = f"""#!{sys.executable}
import http.server, json, sys
print(json.dumps(sys.argv), flush=True)
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Ok).serve_forever()
"""


def _published_port(argv: list[str]) -> int:
    config = json.loads(argv[argv.index(KV_EVENTS_FLAG) + 1])
    return int(config["endpoint"].rsplit(":", 1)[1])


async def test_each_vllm_engine_publishes_on_its_own_port_written_beside_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    vllm = tmp_path / "vllm"
    vllm.write_text(STAND_IN)
    vllm.chmod(0o755)
    monkeypatch.setenv("SHOAL_VLLM", str(vllm))
    spec = load_manifest(write_manifest(tmp_path, manifest(str(tiny_model), engine={"kind": "vllm"}))).spec
    launch = engine_launch(spec, tmp_path)
    assert launch.kv_events and KV_EVENTS_FLAG not in launch.argv
    assert launch.argv[launch.argv.index("--block-size") + 1] == "128"  # vLLM's own on a CPU, told the gateway
    gateway = gateway_argv(spec, UpOptions(), tmp_path / "backends.txt", tmp_path / "dashboard.json")
    assert gateway[gateway.index("--block-size") + 1] == "128"
    fleet = EngineFleet(launch, tmp_path / "backends.txt")
    fleet.scale_to(2)
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                await fleet.tick(asyncio.get_running_loop().time(), client)
                if len(fleet.ready_backends()) == 2:
                    break
                await asyncio.sleep(0.1)
        backends = read_backends(tmp_path / "backends.txt")
        assert len(backends) == 2 and len({b.kv_events_port for b in backends}) == 2
        for replica in fleet.replicas:
            assert replica.process is not None
            argv = json.loads(replica.process.log().splitlines()[0])
            assert _published_port(argv) == replica.kv_events_port
        assert {(r.url, r.kv_events_port) for r in fleet.replicas} == {(b.url, b.kv_events_port) for b in backends}
    finally:
        await fleet.stop(grace_s=5)
