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


def documented() -> dict[str, str]:
    """name -> type, from the table in docs/metrics.md."""
    rows = re.findall(r"^\| `(shoal_engine_\w+)` \| (\w+) \|", DOCS.read_text(), flags=re.M)
    return dict(rows)


def exposed(url: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (shoal_engine_\w+) (\w+)$", httpx.get(f"{url}/metrics").text, flags=re.M))


def test_docs_and_endpoint_list_the_same_metrics(server: ServeProcess) -> None:
    httpx.post(f"{server.url}/v1/completions", json={"model": server.model_name, "prompt": "x", "max_tokens": 2})
    types = exposed(server.url)
    # counter families may be typed with or without their _total suffix
    normalized = {(n.removesuffix("_total") + "_total" if t == "counter" else n): t for n, t in types.items()}
    assert normalized == documented()


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
