"""Autoscale fixtures.

- For the metrics sources: real ``shoal serve`` engines with a tiny random model, and the real Prometheus
  scraping them. Engines run one sequence at a time, so a handful of concurrent requests builds a real queue.
  One configured scrape target listens nowhere: Prometheus has no series for it, as for a replica it cannot reach.
- For the operator's autoscaler on the test-bed apiserver: a namespace per test (the chart and the kubeconfig
  with its ServiceAccount's token come from ``tests/conftest.py``, shared with the operator tests).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # the operator tests' harness

from scraped_fleet import ScrapedFleet
from serve_harness import ServeProcess, build_tiny_model
from support.kube_testbed import ControlPlane, free_port
from support.polling import eventually
from support.services import Prometheus

ENGINE_COUNT = 2


@pytest.fixture(scope="session")
def scraped_fleet(tmp_path_factory: pytest.TempPathFactory, prometheus: Prometheus) -> Iterator[ScrapedFleet]:
    model = build_tiny_model(tmp_path_factory.mktemp("autoscale-tiny"))
    logs = tmp_path_factory.mktemp("autoscale-engines")
    engines = [ServeProcess(model, logs / f"engine-{i}.log", "--max-num-seqs", "1") for i in range(ENGINE_COUNT)]
    try:
        for engine in engines:
            engine.wait_ready()
        dead_url = f"http://127.0.0.1:{free_port()}"
        targets = [
            {"targets": [e.url.removeprefix("http://")], "labels": {"pod": f"engine-{i}"}}
            for i, e in enumerate(engines)
        ]
        targets.append({"targets": [dead_url.removeprefix("http://")], "labels": {"pod": "engine-dead"}})
        prometheus.apply_config(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{"job_name": "shoal-engines", "static_configs": targets}],
            }
        )
        fleet = ScrapedFleet(engines, prometheus, "engine-dead", dead_url)
        eventually(
            lambda: len(prometheus.query('shoal_engine_requests_waiting{job="shoal-engines"}')) == ENGINE_COUNT,
            timeout=60,
            what="Prometheus scraping both engines",
        )
        yield fleet
    finally:
        for engine in engines:
            engine.stop()


@pytest.fixture
def namespace(installed_chart: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "as-" + request.node.name.replace("_", "-").lower()[:40].strip("-")
    installed_chart.kubectl("create", "namespace", name)
    yield name
    installed_chart.kubectl("delete", "namespace", name, "--wait=false", check=False)
