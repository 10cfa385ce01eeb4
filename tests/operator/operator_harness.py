"""Helpers for the operator's kube tests: a real ``shoal operator`` process, and kubectl shorthands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from support.kube_testbed import ControlPlane, free_port
from support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "shoal"
RELEASE, RELEASE_NAMESPACE, SERVICE_ACCOUNT = "shoal", "shoal-system", "shoal"
RESYNC_SECONDS = 1.0
# kube-prometheus-stack's Prometheus selects ServiceMonitors, PodMonitors and PrometheusRules (and its
# Alertmanager AlertmanagerConfigs) by `release: <its release name>` unless told otherwise
KPS_RELEASE = "kube-prometheus-stack"


def install_chart(plane: ControlPlane) -> ControlPlane:
    """``helm upgrade --install`` of charts/shoal (CRDs, RBAC, peering object, operator Deployment): the operator
    and autoscale suites each install it once per session, whichever runs first, without clashing."""
    plane.helm(
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--wait=false",
    )
    plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/inferencedeployments.shoal.dev",
        "crd/clusterkopfpeerings.kopf.dev",
    )
    return plane


class OperatorProcess:
    """A ``python -m shoal.operator operator`` process (the same command as ``shoal operator``, without the other
    areas' parsers); its log is kept for assertions and failure reports. ``restart`` replaces the process."""

    def __init__(self, plane: ControlPlane, kubeconfig: Path, log_path: Path, *extra: str) -> None:
        self.plane, self.kubeconfig, self.log_path, self.extra = plane, kubeconfig, log_path, extra
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.port, self.metrics_port = free_port(), free_port()
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        argv = [
            sys.executable,
            "-m",
            "shoal.operator",
            "operator",
            "--kubeconfig",
            str(self.kubeconfig),
            "--peering",
            "shoal",
            "--resync-seconds",
            str(RESYNC_SECONDS),
            "--discovery-seconds",
            "2",
            "--liveness",
            f"http://127.0.0.1:{self.port}/healthz",
            "--metrics-port",
            str(self.metrics_port),
            *self.extra,
        ]
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.plane.env(self.kubeconfig),
                start_new_session=True,
                cwd=REPO,
            )

    def metrics(self) -> str:
        """The operator's own ``/metrics`` page."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def log(self) -> str:
        """This process's log (since its last start)."""
        return self.log_path.read_text(errors="replace")[self.log_offset :]

    def wait_ready(self, timeout: float = 60.0) -> None:
        def live() -> bool:
            assert self.process.poll() is None, f"operator exited:\n{self.log()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        eventually(live, timeout, "operator liveness endpoint")

    def restart(self) -> None:
        self.stop()
        self.process = self._start()
        self.wait_ready()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def example(name: str, **spec: Any) -> dict[str, Any]:
    """The CPU SmolLM2 example, renamed and with ``spec`` fields overridden."""
    body = yaml.safe_load((REPO / "examples" / "smollm2-cpu.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"].update(spec)
    return body


def apply(plane: ControlPlane, namespace: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return plane.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False)


def get(plane: ControlPlane, namespace: str, *what: str) -> dict[str, Any] | None:
    result = plane.kubectl("get", "-n", namespace, *what, "-o", "yaml", check=False)
    return yaml.safe_load(result.stdout) if result.returncode == 0 else None


def condition(infd: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conditions = ((infd or {}).get("status") or {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def children_of(plane: ControlPlane, namespace: str, name: str) -> dict[str, dict[str, Any] | None]:
    """Every child the operator creates for ``name`` (None where missing), keyed ``kind/name``."""
    wanted = [
        ("serviceaccount", f"{name}-gateway"),
        ("role", f"{name}-gateway"),
        ("rolebinding", f"{name}-gateway"),
        ("service", f"{name}-engine"),
        ("deployment", f"{name}-engine"),
        ("configmap", f"{name}-gateway"),
        ("deployment", f"{name}-gateway"),
        ("service", name),
        ("networkpolicy", f"{name}-engine"),
        ("poddisruptionbudget", f"{name}-engine"),
        ("poddisruptionbudget", f"{name}-gateway"),
        ("secret", f"{name}-api-keys"),
    ]
    return {f"{kind}/{child}": get(plane, namespace, kind, child) for kind, child in wanted}


def wait_ready(plane: ControlPlane, namespace: str, name: str, timeout: float = 90.0) -> dict[str, Any]:
    """The InferenceDeployment once Ready is True and nothing is progressing. A failure shows its last status
    and its Deployments and pods: enough to tell an operator bug from a cluster whose pods never got ready."""

    def settled() -> dict[str, Any] | None:
        infd = get(plane, namespace, "infd", name)
        done = (
            condition(infd, "Ready").get("status") == "True" and condition(infd, "Progressing").get("status") == "False"
        )
        return infd if done else None

    def detail() -> str:
        status = (get(plane, namespace, "infd", name) or {}).get("status")
        children = plane.kubectl("get", "-n", namespace, "deployments,pods", "-o", "wide", check=False).stdout
        return f"status: {status!r}\n{children}"

    return eventually(settled, timeout, f"{namespace}/{name} Ready and not Progressing", detail=detail)
