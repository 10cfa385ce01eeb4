"""The kubelet's part for the autoscaler's real-parts tests: the fleet's pods are kwok fakes, so each engine pod
the Deployment has gets a Prometheus scrape target that is a real local engine, labelled ``namespace`` and
``pod`` with the fake pod's real name (what a PodMonitor would give it); load on those engines; the operator as
a real process with the autoscaler's flags."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from operator_harness import OperatorProcess, get
from scraped_fleet import Resending, ScrapedFleet
from support.kube_testbed import ControlPlane
from support.services import Prometheus


def component_pods(plane: ControlPlane, namespace: str, name: str, component: str) -> list[str]:
    """The names of an InferenceDeployment's pods of one component (``engine`` or ``gateway``), sorted."""
    listing = plane.kubectl(
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        f"app.kubernetes.io/instance={name},app.kubernetes.io/component={component}",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ).stdout
    return sorted(listing.split())


def engine_pods(plane: ControlPlane, namespace: str, name: str) -> list[str]:
    return component_pods(plane, namespace, name, "engine")


def engines(plane: ControlPlane, namespace: str, name: str) -> int | None:
    return (get(plane, namespace, "deployment", f"{name}-engine") or {}).get("spec", {}).get("replicas")


class PodScrapes:
    """Keeps one Prometheus scrape target per engine pod of the fleet (the kubelet's part, see the docstring),
    added to the session's Prometheus configuration and taken out again at the end."""

    def __init__(self, prometheus: Prometheus, fleet: Any, plane: ControlPlane, namespace: str, name: str) -> None:
        self.prometheus, self.fleet, self.plane, self.namespace, self.name = prometheus, fleet, plane, namespace, name
        self.base = yaml.safe_load(prometheus.config_path.read_text())
        self.extra: dict[str, Any] = {}
        self.extra_jobs: list[dict[str, Any]] = []
        self.rules: dict[str, Any] | None = None
        self.mapped: list[str] = []

    def sync(self) -> list[str]:
        pods = engine_pods(self.plane, self.namespace, self.name)
        if pods != self.mapped:
            self.mapped = pods
            self.apply()
        return pods

    def apply(self) -> None:
        urls = [e.url.removeprefix("http://") for e in self.fleet.engines]
        targets = [
            {"targets": [urls[i % len(urls)]], "labels": {"namespace": self.namespace, "pod": pod}}
            for i, pod in enumerate(self.mapped)
        ]
        config = {
            **self.base,
            **self.extra,
            "scrape_configs": [
                *self.base["scrape_configs"],
                {"job_name": "infd-engines", "static_configs": targets},
                *self.extra_jobs,
            ],
        }
        self.prometheus.apply_config(config, self.rules)

    def restore(self) -> None:
        self.prometheus.apply_config(self.base)


@contextmanager
def pod_scrapes(
    prometheus: Prometheus, fleet: Any, plane: ControlPlane, namespace: str, name: str
) -> Iterator[PodScrapes]:
    scrapes = PodScrapes(prometheus, fleet, plane, namespace, name)
    try:
        yield scrapes
    finally:
        scrapes.restore()


def load(fleet: ScrapedFleet, engine: int, requests: int) -> Resending:
    """``requests`` clients on one engine, each resending as its own request ends, for the ``with`` block."""
    return Resending(fleet, engine, requests)


def start_operator(
    plane: ControlPlane, kubeconfig: Path, prometheus: Prometheus, log: Path, *extra: str
) -> OperatorProcess:
    process = OperatorProcess(
        plane,
        kubeconfig,
        log,
        "--priority",
        "400",
        "--prometheus-url",
        prometheus.url,
        "--metrics-timeout",
        "3",
        *extra,
    )
    process.wait_ready()
    return process
