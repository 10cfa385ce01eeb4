"""Autoscale fixtures.

- For the metrics sources: real ``shoal serve`` engines with a tiny random model, and the real Prometheus
  scraping them. Engines run one sequence at a time, so a handful of concurrent requests builds a real queue.
  One configured scrape target listens nowhere: Prometheus has no series for it, as for a replica it cannot reach.
- For the operator's autoscaler on the test-bed apiserver: the chart installed, a kubeconfig with the chart's
  ServiceAccount token, a namespace per test (as in ``tests/operator/conftest.py``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from operator_harness import RELEASE_NAMESPACE, SERVICE_ACCOUNT, install_chart  # noqa: E402
from serve_harness import ServeProcess, build_tiny_model  # noqa: E402
from support.kube_testbed import ControlPlane, free_port  # noqa: E402
from support.polling import eventually  # noqa: E402
from support.services import Prometheus  # noqa: E402

from shoal.autoscale.source import ReplicaTarget  # noqa: E402

ENGINE_COUNT = 2


@dataclass
class ScrapedFleet:
    """The engines (``engine-0``, ``engine-1``), the name of a target nobody serves, and the Prometheus job."""

    engines: list[ServeProcess]
    prometheus: Prometheus
    dead_name: str
    dead_url: str

    def targets(self, *, dead: bool = False) -> list[ReplicaTarget]:
        targets = [ReplicaTarget(f"engine-{i}", "ready", 0.0, e.url) for i, e in enumerate(self.engines)]
        return targets + [ReplicaTarget(self.dead_name, "ready", 0.0, self.dead_url)] if dead else targets

    def load(self, engine: int, requests: int, max_tokens: int = 48) -> list[float]:
        """Sends ``requests`` concurrent completions to one engine and returns each one's latency."""
        client = openai.OpenAI(base_url=f"{self.engines[engine].url}/v1", api_key="unused", max_retries=0, timeout=120)

        def one(i: int) -> float:
            response = client.with_raw_response.completions.create(
                model="tiny-llama", prompt=f"load {i}", max_tokens=max_tokens, temperature=0.0,
                extra_body={"ignore_eos": True},
            )
            return response.elapsed.total_seconds()

        with ThreadPoolExecutor(requests) as pool:
            return list(pool.map(one, range(requests)))


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """SIGSTOPs a real process (its sockets still accept, nothing answers: a hang), SIGCONTs it afterwards."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="session")
def scraped_fleet(tmp_path_factory: pytest.TempPathFactory, prometheus: Prometheus) -> Iterator[ScrapedFleet]:
    model = build_tiny_model(tmp_path_factory.mktemp("autoscale-tiny"))
    logs = tmp_path_factory.mktemp("autoscale-engines")
    engines = [ServeProcess(model, logs / f"engine-{i}.log", "--max-num-seqs", "1") for i in range(ENGINE_COUNT)]
    try:
        for engine in engines:
            engine.wait_ready()
        dead_url = f"http://127.0.0.1:{free_port()}"
        targets = [{"targets": [e.url.removeprefix("http://")], "labels": {"pod": f"engine-{i}"}}
                   for i, e in enumerate(engines)]
        targets.append({"targets": [dead_url.removeprefix("http://")], "labels": {"pod": "engine-dead"}})
        prometheus.apply_config({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "shoal-engines", "static_configs": targets}],
        })
        fleet = ScrapedFleet(engines, prometheus, "engine-dead", dead_url)
        eventually(lambda: len(prometheus.query('shoal_engine_requests_waiting{job="shoal-engines"}')) == ENGINE_COUNT,
                   timeout=60, what="Prometheus scraping both engines")
        yield fleet
    finally:
        for engine in engines:
            engine.stop()


@pytest.fixture(scope="session")
def installed_chart(kube_apiserver: ControlPlane) -> ControlPlane:
    """charts/shoal installed into the test cluster (CRDs, RBAC, peering object, operator Deployment)."""
    return install_chart(kube_apiserver)


@pytest.fixture(scope="session")
def operator_kubeconfig(installed_chart: ControlPlane) -> Path:
    """A kubeconfig holding a token of the chart's ServiceAccount: the operator gets exactly the chart's RBAC."""
    return installed_chart.kubeconfig_for_service_account(RELEASE_NAMESPACE, SERVICE_ACCOUNT, create=False).kubeconfig


@pytest.fixture
def namespace(installed_chart: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "as-" + request.node.name.replace("_", "-").lower()[:40].strip("-")
    installed_chart.kubectl("create", "namespace", name)
    yield name
    installed_chart.kubectl("delete", "namespace", name, "--wait=false", check=False)
