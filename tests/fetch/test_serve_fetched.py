"""``shoal serve --model hf://...`` fetches from the Hub stand-in before it loads and serves the model under the
repo's name; a fetch that fails stops it with exit status 1 and the Hub's answer."""

from __future__ import annotations

import json
import sys
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


def test_lora_adapters_are_fetched_at_start_and_at_run_time(hub: HubServer, tiny_dir: Path, tmp_path: Path) -> None:
    """``--lora-modules NAME=hf://...``, ``--lora-modules-file`` and ``/v1/load_lora_adapter`` fetch a PEFT
    adapter's config and weights only; the file's adapter that cannot be fetched is left out, the start goes on."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))  # the engine tests' adapter writer
    from lora_adapters import write_adapter

    adapter = write_adapter(tiny_dir, tmp_path / "adapter", 1, r=4, target_modules=["q_proj", "v_proj"])
    (adapter / "README.md").write_text("# an adapter\n")  # PEFT writes one: not needed to serve
    hub.hub.add_directory("tiny/adapter", adapter)
    cache = tmp_path / "cache"
    modules = tmp_path / "adapters.json"
    modules.write_text(
        json.dumps([{"name": "filed", "path": "hf://tiny/adapter"}, {"name": "gone", "path": "hf://tiny/absent"}])
    )
    argv = shoal_command(
        "serve", "--model", str(tiny_dir), "--download-dir", str(cache), "--num-kv-blocks", "64", "--enable-lora",
        "--max-lora-rank", "4", "--lora-modules", "first=hf://tiny/adapter", "--allow-runtime-lora-updating",
        "--lora-modules-file", str(modules),
    )  # fmt: skip
    engine = LocalProcess(argv, tmp_path / "engine.log", env=hub_env(hub))
    try:
        engine.wait_ready(timeout=120)
        body = {"lora_name": "second", "lora_path": "hf://tiny/adapter"}
        assert httpx.post(engine.url + "/v1/load_lora_adapter", json=body, timeout=60).status_code == 200
        absent = {"lora_name": "third", "lora_path": "hf://tiny/absent"}
        refused = httpx.post(engine.url + "/v1/load_lora_adapter", json=absent, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "lora_path", refused.text
        names = [m["id"] for m in httpx.get(engine.url + "/v1/models").json()["data"]]
        assert {"first", "second", "filed"} <= set(names) and "gone" not in names
        assert "'gone' from hf://tiny/absent not loaded" in engine.log(20000)
    finally:
        engine.stop()
    assert dict(hub.hub.downloads) == dict.fromkeys(("adapter_config.json", "adapter_model.safetensors"), 1)
