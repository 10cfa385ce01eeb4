"""Operator scale benchmark: N InferenceDeployments applied at once to a real kube-apiserver.

Measures, in one run against one control plane (etcd + kube-apiserver built by `make kube-testbin`, the chart
installed, the operator run with the chart's ServiceAccount):
  * time from the bulk apply until every object is reconciled and Ready-evaluated (children applied, status
    with conditions and observedGeneration), for a small batch (the baseline) and the full batch;
  * the operator's resident memory idle (the baseline) and after the full batch (VmRSS, and VmHWM peak);
  * a restart over the full batch: time until every object is resumed, and how many were written (should be 0).
No controller-manager runs, so Deployments get no pods: Ready is evaluated (False, EnginesNotReady), which is
what this measures. Usage:  .venv/bin/python bench/operator_scale.py [--count 200] [--baseline 20]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RESYNC_SECONDS = 5.0
sys.path.insert(0, str(REPO / "tests"))

from support.kube_testbed import ControlPlane, free_port  # noqa: E402


def proc_memory_mib(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


def bodies(namespace: str, prefix: str, count: int) -> str:
    items = []
    for i in range(count):
        items.append(
            {
                "apiVersion": "shoal.dev/v1alpha1",
                "kind": "InferenceDeployment",
                "metadata": {"name": f"{prefix}-{i:03d}", "namespace": namespace},
                "spec": {"model": {"source": "smollm2-135m"}, "engine": {"resources": {"gpus": 1}}},
            }
        )
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def evaluated(plane: ControlPlane, namespace: str) -> tuple[int, dict[str, str]]:
    """(how many are Ready-evaluated, name -> resourceVersion) in ``namespace``."""
    out = plane.kubectl("get", "infd", "-n", namespace, "-o", "json").stdout
    done, versions = 0, {}
    for item in json.loads(out)["items"]:
        status = item.get("status") or {}
        versions[item["metadata"]["name"]] = item["metadata"]["resourceVersion"]
        if status.get("observedGeneration") == item["metadata"]["generation"] and status.get("conditions"):
            done += 1
    return done, versions


def wait_all(plane: ControlPlane, namespace: str, count: int, timeout: float = 600) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if evaluated(plane, namespace)[0] == count:
            return time.monotonic() - start
        time.sleep(0.25)
    raise TimeoutError(f"not all {count} reconciled within {timeout}s")


def settled(plane: ControlPlane, namespace: str, timeout: float = 180) -> dict[str, str]:
    """resourceVersions once two snapshots a few status refreshes apart agree (the world is steady)."""
    _, previous = evaluated(plane, namespace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(2.5 * RESYNC_SECONDS)
        _, current = evaluated(plane, namespace)
        if current == previous:
            return current
        previous = current
    raise TimeoutError(f"{namespace} still changing after {timeout}s")


class Operator:
    def __init__(self, plane: ControlPlane, kubeconfig: Path, log: Path) -> None:
        self.port = free_port()
        argv = [
            sys.executable,
            "-m",
            "shoal.operator",
            "operator",
            "--kubeconfig",
            str(kubeconfig),
            "--resync-seconds",
            str(RESYNC_SECONDS),
            "--liveness",
            f"http://127.0.0.1:{self.port}/healthz",
        ]
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=plane.env(kubeconfig), start_new_session=True, cwd=REPO
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"operator did not start:\n{log.read_text()[-2000:]}") from None
                time.sleep(0.3)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(60)


def run(count: int, baseline: int) -> dict[str, Any]:
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="shoal-bench-operator-")))
    plane.start()
    operator: Operator | None = None
    try:
        plane.helm("install", "shoal", str(REPO / "charts" / "shoal"), "-n", "shoal-system", "--create-namespace")
        plane.kubectl("wait", "--for=condition=Established", "crd/inferencedeployments.shoal.dev")
        kubeconfig = plane.kubeconfig_for_service_account("shoal-system", "shoal", create=False).kubeconfig
        operator = Operator(plane, kubeconfig, plane.workdir / "operator.log")
        time.sleep(2)
        idle = proc_memory_mib(operator.process.pid)
        results: dict[str, Any] = {"count": count, "baseline_count": baseline, "idle_rss_mib": idle["VmRSS"]}
        for label, n in (("baseline", baseline), ("full", count)):
            namespace = f"bench-{label}"
            plane.kubectl("create", "namespace", namespace)
            start = time.monotonic()
            plane.kubectl("create", "-f", "-", input=bodies(namespace, label, n))
            applied = time.monotonic() - start
            total = applied + wait_all(plane, namespace, n)
            results[f"{label}_apply_s"] = round(applied, 2)
            results[f"{label}_reconciled_s"] = round(total, 2)
            results[f"{label}_per_object_ms"] = round(1000 * total / n, 1)
        memory = proc_memory_mib(operator.process.pid)
        results["loaded_rss_mib"], results["peak_rss_mib"] = memory["VmRSS"], memory["VmHWM"]
        before = settled(plane, "bench-full")
        operator.stop()
        start = time.monotonic()
        operator = Operator(plane, kubeconfig, plane.workdir / "operator-restart.log")
        log = plane.workdir / "operator-restart.log"
        while log.read_text().count(" is processed: ") < count + baseline and time.monotonic() - start < 600:
            time.sleep(0.25)
        results["restart_resumed_s"] = round(time.monotonic() - start, 2)
        time.sleep(2.5 * RESYNC_SECONDS)  # and a couple of status refreshes
        _, after = evaluated(plane, "bench-full")
        results["restart_objects_written"] = sum(before[name] != after.get(name) for name in before)
        return results
    finally:
        if operator is not None:
            operator.stop()
        plane.stop()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the control plane and the operator
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=20)
    args = parser.parse_args()
    results = run(args.count, args.baseline)
    results["per_object_ratio_full_vs_baseline"] = round(
        results["full_per_object_ms"] / results["baseline_per_object_ms"], 2
    )
    results["rss_ratio_loaded_vs_idle"] = round(results["loaded_rss_mib"] / results["idle_rss_mib"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
