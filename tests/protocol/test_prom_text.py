"""The one Prometheus text reader: a family summed over its label sets, and a page that is not Prometheus text
refused with one error whatever the library's parser tripped on."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from shoal.protocol.prom_text import PromTextError, family_sum, samples


def test_a_family_is_summed_over_its_label_sets_and_counts_its_total_samples() -> None:
    registry = CollectorRegistry()
    held = Gauge("demo_held", "Held.", ["tenant"], registry=registry)
    held.labels("a").set(2)
    held.labels("b").set(3)
    Counter("demo_done", "Done.", registry=registry).inc(4)
    page = generate_latest(registry).decode()
    assert family_sum(page, "demo_held") == 5.0
    assert next(s.name for s in samples(page) if s.family == "demo_done") == "demo_done_total"
    assert family_sum(page, "demo_absent") == 0.0


@pytest.mark.parametrize("page", ["<html>not metrics</html>", 'x{le="1" 2\n', "x one\n"])
def test_a_page_that_is_not_prometheus_text_is_refused(page: str) -> None:
    with pytest.raises(PromTextError, match="not Prometheus text"):
        family_sum(page, "x")
