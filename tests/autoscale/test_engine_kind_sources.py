"""The autoscaler's two sources over a real ``llama-server``: its own series (``docs/engines.md``) read directly
and through a real Prometheus; what it does not export (TTFT, finished requests, KV use) stays None, never
zero, and the fleet is never reported ``MetricsMissing`` while its metrics are there."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.polling import eventually
from support.services import Prometheus, start_prometheus

from shoal.autoscale.prometheus_source import PrometheusSource
from shoal.autoscale.scrape_source import ScrapeSource
from shoal.autoscale.signals import FleetSignals
from shoal.autoscale.source import ReplicaTarget
from shoal.engine_kinds import ADAPTERS
from shoal.local import LocalProcess
from shoal.model_registry import resolve_model
from shoal.operator.autoscaler import FleetRef
from shoal.operator.sources import ClusterObserver
from shoal.operator.spec import InferenceDeploymentSpec

REPO = Path(__file__).resolve().parents[2]
LLAMA = ADAPTERS["llamacpp"]
POD = "chat-engine-5d8f7c9b6-x2x9z"  # as the engine Deployment names its pods, which the dashboard selects


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcess]:
    script = REPO / "hack" / "llama-server" / "build.sh"
    binary = Path(subprocess.run([str(script), "--path"], capture_output=True, text=True, check=True).stdout.strip())
    if not binary.is_file():
        pytest.skip(f"no llama-server at {binary} (run hack/llama-server/build.sh)")
    gguf = str(resolve_model("smollm2-135m").path)
    argv = [str(binary), "-m", gguf, "--metrics", "--parallel", "1", "--ctx-size", "1024", "--threads", "1"]
    server = LocalProcess([*argv, "--no-repack"], tmp_path_factory.mktemp("llama") / "llama.log")
    try:
        yield server.wait_ready("/health", timeout=60)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, llama_server: LocalProcess) -> Iterator[Prometheus]:
    target = {"targets": [llama_server.url.removeprefix("http://")], "labels": {"pod": POD}}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "llama", "static_configs": [target]}],
    }
    service = start_prometheus(tmp_path_factory.mktemp("prometheus-llama"), config)
    try:
        eventually(lambda: service.query("llamacpp:requests_deferred"), timeout=60, what="Prometheus scraping it")
        yield service
    finally:
        service.stop()


def _busy(server: LocalProcess, requests: int) -> list[threading.Thread]:
    """``requests`` long completions at once on one slot: all but one are deferred."""

    def one() -> None:
        body = {"prompt": "Once upon a time", "max_tokens": 100, "ignore_eos": True}
        httpx.post(server.url + "/v1/completions", json=body, timeout=120)

    threads = [threading.Thread(target=one) for _ in range(requests)]
    for thread in threads:
        thread.start()
    return threads


def _check(signals: FleetSignals) -> None:
    assert signals.missing is None
    (replica,) = signals.replicas
    assert replica.waiting is not None and replica.waiting >= 1 and replica.running == 1
    assert replica.kv_usage is None and replica.max_num_seqs is None
    assert signals.ttft_p95_seconds is None and signals.arrival_rate is None


def test_the_scrape_source_reads_llama_servers_queue_and_leaves_what_it_lacks_unknown(
    llama_server: LocalProcess,
) -> None:
    target = ReplicaTarget(POD, "ready", 0.0, llama_server.url)

    async def observe() -> list[FleetSignals]:
        async with httpx.AsyncClient() as client:
            source = ScrapeSource(client, metrics=LLAMA.metrics)
            first = await source.observe(time.time(), 1, [target])
            await asyncio.sleep(1.0)
            return [first, await source.observe(time.time(), 1, [target])]

    threads = _busy(llama_server, 3)
    eventually(lambda: "llamacpp:requests_deferred 2" in httpx.get(llama_server.url + "/metrics").text, timeout=30)
    first, second = asyncio.run(observe())
    _check(first)
    _check(second)
    assert second.output_tokens_per_second is not None  # llama.cpp adds a request's tokens when it ends
    for thread in threads:
        thread.join(timeout=180)


def test_the_prometheus_source_reads_llama_servers_queue_through_prometheus(
    llama_server: LocalProcess, prometheus: Prometheus
) -> None:
    target = ReplicaTarget(POD, "ready", 0.0, llama_server.url)

    async def observe() -> FleetSignals:
        async with httpx.AsyncClient() as client:
            source = PrometheusSource(client, prometheus.url, 'job="llama"', metrics=LLAMA.metrics)
            return await source.observe(time.time(), 1, [target])

    threads = _busy(llama_server, 3)
    eventually(lambda: asyncio.run(observe()).replicas[0].waiting, timeout=30, what="the queue in Prometheus")
    _check(asyncio.run(observe()))
    for thread in threads:
        thread.join(timeout=180)


def test_the_charts_dashboard_panels_show_a_llama_server_fleet(prometheus: Prometheus) -> None:
    """Every panel's query runs on a real Prometheus; the queue and running panels show llama-server's series
    (each panel reads every kind's series: ``docs/engines.md``)."""
    dashboard = json.loads((REPO / "charts" / "shoal" / "files" / "dashboard.json").read_text())
    panels = {
        p["title"]: p["targets"][0]["expr"]
        .replace("$namespace", ".*")
        .replace("$fleet", POD.split("-engine-")[0])
        .replace("$__rate_interval", "1m")
        for p in dashboard["panels"]
        if p["type"] != "row"
    }
    shown = {title: prometheus.query(expr) for title, expr in panels.items()}
    with_llama = {title for title, result in shown.items() if any(s["metric"].get("pod") == POD for s in result)}
    assert len(with_llama) == 2, (with_llama, panels)  # waiting and running; it has no TTFT histogram or KV use


def test_the_operators_observer_reads_a_llamacpp_fleet_through_its_kinds_series(llama_server: LocalProcess) -> None:
    """The operator's own observer picks the source for the fleet's engine kind: a llama.cpp fleet is observed,
    never ``MetricsMissing`` for want of Shoal's series (no gateway, so no held requests to read)."""
    spec = InferenceDeploymentSpec.model_validate(
        {"model": {"source": "/models/m.gguf"}, "engine": {"kind": "llamacpp"}, "gateway": {"replicas": 0}}
    )
    fleet = FleetRef("team-a", "chat", spec, (ReplicaTarget(POD, "ready", 0.0, llama_server.url),))

    async def observe() -> FleetSignals:
        async with httpx.AsyncClient() as client:
            return await ClusterObserver(client, None).observe(fleet, 1, time.time())

    signals = asyncio.run(observe())
    assert signals.missing is None and signals.replicas[0].waiting == 0 and signals.replicas[0].running == 0
