"""``/metrics`` exposes every metric docs/metrics.md lists, and the histograms fill under load."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from serve_harness import ServeProcess

from shoal.local import metric, metric_values

pytestmark = pytest.mark.timeout(120)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented(lora: bool = False) -> dict[str, str]:
    """name -> type, from the engine's table in docs/metrics.md (``lora``: the table of the LoRA-only ones)."""
    always, _, with_lora = DOCS.read_text().partition("### With `--enable-lora`")
    rows = re.findall(r"^\| `(shoal_engine_\w+)` \| (\w+) \|", with_lora if lora else always, flags=re.M)
    return dict(rows)


def exposed(url: str) -> dict[str, str]:
    """name -> type, from the page (a counter with its ``_total`` suffix, as the docs write it)."""
    types = re.findall(r"^# TYPE (shoal_engine_\w+) (\w+)$", httpx.get(f"{url}/metrics").text, flags=re.M)
    return {(n.removesuffix("_total") + "_total" if t == "counter" else n): t for n, t in types}


def test_docs_and_endpoint_list_the_same_metrics(server: ServeProcess) -> None:
    httpx.post(f"{server.url}/v1/completions", json={"model": server.model_name, "prompt": "x", "max_tokens": 2})
    assert exposed(server.url) == documented()


def test_a_lora_engine_adds_the_lora_metrics(lora_server: ServeProcess) -> None:
    body = {"model": lora_server.model_name, "prompt": "x", "max_tokens": 2}  # the first token's time is a series
    httpx.post(f"{lora_server.url}/v1/completions", json=body)
    assert exposed(lora_server.url) == documented() | documented(lora=True)


def test_histograms_and_counters_move_with_traffic(server: ServeProcess) -> None:
    finished = metric(server.url, "shoal_engine_requests_finished_total")
    generated = metric(server.url, "shoal_engine_generation_tokens_total")
    for i in range(3):
        r = httpx.post(
            f"{server.url}/v1/completions",
            json={"model": server.model_name, "prompt": f"count {i}", "max_tokens": 5, "ignore_eos": True},
            timeout=30,
        )
        assert r.status_code == 200
    assert metric(server.url, "shoal_engine_requests_finished_total") == finished + 3
    assert metric(server.url, "shoal_engine_generation_tokens_total") >= generated + 15
    assert (
        metric_values(server.url, "shoal_engine_requests_finished_total").get(
            f'{{model="{server.model_name}",reason="length"}}', 0
        )
        >= 3
    )
    for name in (
        "time_to_first_token",
        "inter_token_latency",
        "e2e_request_latency",
        "queue_time",
        "prefill_time",
        "decode_time",
    ):
        assert metric(server.url, f"shoal_engine_{name}_seconds_count") > 0, name
