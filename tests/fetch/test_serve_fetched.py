"""``shoal serve --model hf://...`` fetches from the Hub stand-in before it loads and serves the model under the
repo's name; a fetch that fails stops it with exit status 1 and the Hub's answer."""

from __future__ import annotations

from pathlib import Path

import httpx
from fetch_harness import hub_env
from hub_standin import HubServer

from shoal.local.process import LocalProcess, shoal_command


def _serve(model: str, cache: Path, log: Path, hub: HubServer) -> LocalProcess:
    argv = shoal_command("serve", "--model", model, "--download-dir", str(cache), "--num-kv-blocks", "64")
    return LocalProcess(argv, log, env=hub_env(hub))


def test_serve_fetches_then_serves(hub: HubServer, tiny_dir: Path, tmp_path: Path) -> None:
    hub.hub.add_directory("tiny/llama", tiny_dir)
    first = _serve("hf://tiny/llama", tmp_path / "cache", tmp_path / "engine-1.log", hub)
    try:
        first.wait_ready(timeout=120)
        names = [m["id"] for m in httpx.get(first.url + "/v1/models").json()["data"]]
        assert names == ["tiny/llama", "hf://tiny/llama"]
        answer = httpx.post(
            first.url + "/v1/completions",
            json={"model": "tiny/llama", "prompt": "The capital of France", "max_tokens": 4, "temperature": 0},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 4
    finally:
        first.stop()
    served = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    assert dict(hub.hub.downloads) == dict.fromkeys(served, 1)


def test_serve_exits_1_naming_the_hubs_answer(hub: HubServer, tmp_path: Path) -> None:
    engine = _serve("hf://tiny/absent", tmp_path / "cache", tmp_path / "engine.log", hub)
    assert engine.process.wait(timeout=60) == 1
    assert "401 from the Hub: credentials missing or wrong" in engine.log()
