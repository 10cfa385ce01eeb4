"""LoRA adapters through a real ``shoal serve`` process and the official ``openai`` client.

One adapter is loaded at start-up (``--lora-modules``), others at run time (``/v1/load_lora_adapter``); with a
single slot (``--max-loras 1``) serving them in turn evicts the idle one, and requests for two adapters at once
both finish (one waits for the slot). Bad adapters are refused with a 400 naming the field and the reason, and
the engine keeps serving.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

PROMPT = "The capital of France is"


@pytest.fixture
def lora_client(lora_server: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{lora_server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def complete(client: openai.OpenAI, model: str) -> str:
    return client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0).choices[0].text


def post(server: ServeProcess, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=30)


def metric(server: ServeProcess, name: str) -> float:
    page = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(name))


def test_adapters_serve_load_evict_and_unload(
    lora_server: ServeProcess, lora_client: openai.OpenAI, adapters: dict[str, Path]
) -> None:
    models = {m.id: m for m in lora_client.models.list().data}
    assert models["first"].model_extra["parent"] == TINY_MODEL_NAME
    assert models["first"].model_extra["root"] == str(adapters["first"])
    base, first = complete(lora_client, TINY_MODEL_NAME), complete(lora_client, "first")
    assert base != first

    loaded = post(lora_server, "/v1/load_lora_adapter", {"lora_name": "second", "lora_path": str(adapters["second"])})
    assert loaded.status_code == 200, loaded.text
    assert "second" in {m.id for m in lora_client.models.list().data}
    second = complete(lora_client, "second")
    assert second not in (base, first)
    assert metric(lora_server, "shoal_engine_lora_evictions") >= 1, "one slot: second evicted the idle first"
    assert complete(lora_client, "first") == first, "first came back into the slot intact"

    with ThreadPoolExecutor(4) as pool:  # two adapters, one slot: one waits in the scheduler, none fails
        texts = list(pool.map(lambda m: complete(lora_client, m), ["first", "second", "first", "second"]))
    assert texts == [first, second, first, second]
    tokens = f'shoal_engine_lora_generation_tokens_total{{adapter="second",model="{TINY_MODEL_NAME}"}}'
    assert metric(lora_server, tokens) >= 3 * 8, "second's three requests, 8 tokens each"

    assert post(lora_server, "/v1/unload_lora_adapter", {"lora_name": "second"}).status_code == 200
    assert "second" not in {m.id for m in lora_client.models.list().data}
    with pytest.raises(openai.NotFoundError):
        complete(lora_client, "second")
    gone = post(lora_server, "/v1/unload_lora_adapter", {"lora_name": "second"})
    assert gone.status_code == 404 and gone.json()["error"]["param"] == "lora_name"


@pytest.mark.parametrize(
    ("name", "adapter", "param", "reason"),
    [
        ("big", "too-big", "lora_path", "rank 16, more than --max-lora-rank 8"),
        ("head", "lm-head", "lora_path", "'lm_head'"),
        ("mismatch", "other-base", "lora_path", "does not fit the base model"),
        ("missing", None, "lora_path", "no adapter_config.json"),
        (TINY_MODEL_NAME, "second", "lora_name", "the base model's name"),
        ("first", "second", "lora_name", "already loaded"),
    ],
)
def test_bad_adapters_are_refused_naming_the_reason(
    lora_server: ServeProcess,
    lora_client: openai.OpenAI,
    adapters: dict[str, Path],
    tmp_path: Path,
    name: str,
    adapter: str | None,
    param: str,
    reason: str,
) -> None:
    path = str(adapters[adapter]) if adapter else str(tmp_path / "nowhere")
    response = post(lora_server, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and reason in error["message"], error
    assert complete(lora_client, TINY_MODEL_NAME), "the engine keeps serving"


def test_runtime_updating_is_off_without_its_flag(server: ServeProcess) -> None:
    response = post(server, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/nowhere"})
    assert response.status_code == 404
