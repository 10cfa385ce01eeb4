"""``shoal.local.metrics`` reads a real ``prometheus_client`` exposition: names, labels (escaped) and values."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from shoal.local import free_port, metric, metric_values
from shoal.protocol.prom_text import samples_named


@pytest.fixture
def page() -> Iterator[tuple[str, CollectorRegistry]]:
    registry = CollectorRegistry()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield f"http://127.0.0.1:{port}", registry
    server.shutdown()
    thread.join(timeout=5)


def test_values_are_keyed_by_their_labels_as_the_page_writes_them(page) -> None:
    url, registry = page
    finished = Counter("demo_requests_finished", "Finished.", ["model", "reason"], registry=registry)
    finished.labels("tiny", "length").inc(3)
    finished.labels('odd "name"\\x', "stop").inc(2)
    Gauge("demo_waiting", "Waiting.", registry=registry).set(5)
    assert metric_values(url, "demo_requests_finished_total") == {
        '{model="tiny",reason="length"}': 3.0,
        '{model="odd \\"name\\"\\\\x",reason="stop"}': 2.0,
    }
    assert metric(url, "demo_requests_finished_total") == 5.0
    assert metric_values(url, "demo_waiting") == {"": 5.0}
    assert metric(url, "demo_absent") == 0.0


def test_samples_named_picks_one_series_of_a_histogram_with_its_labels(page) -> None:
    _, registry = page
    latency = Histogram("demo_latency_seconds", "Latency.", ["model"], buckets=(0.1, 1.0), registry=registry)
    for value in (0.05, 0.5, 5.0):
        latency.labels("tiny").observe(value)
    text = generate_latest(registry).decode()
    buckets = {labels["le"]: value for labels, value in samples_named(text, "demo_latency_seconds_bucket")}
    assert buckets == {"0.1": 1.0, "1.0": 2.0, "+Inf": 3.0}
    assert samples_named(text, "demo_latency_seconds_count") == [({"model": "tiny"}, 3.0)]
    assert samples_named(text, "demo_latency_seconds") == []
