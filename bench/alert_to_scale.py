"""Alert-to-scale benchmark: from an Alertmanager notification's receipt to the engine Deployment's scale write.

One run against one control plane (etcd + kube-apiserver from `make kube-testbin`, the chart installed, a real
`shoal operator` process with the chart's ServiceAccount, its Alertmanager receiver on, and a real Prometheus).
``--fleets`` InferenceDeployments (min 1, max 4, `metrics.source: prometheus`) each get one firing alert, posted
as Alertmanager posts it (v4 payload, bearer token), one at a time; each is a whole alert pass: read the object,
query Prometheus (the policy's 9 queries and the gateway's held requests), decide, write the engine count,
patch the status, post the Event. The receiver answers after the write, so the POST's latency is an upper bound
on receipt-to-write, and its `Server-Timing: write` is receipt-to-write itself. Baseline, in the same run: a bare merge-patch of a Deployment's replicas through the same
apiserver (the write alone). The engine metrics Prometheus scrapes are a static page (a recorded backlog of 12
waiting requests per engine, labelled with each fleet's pod name): no engine runs, so only the operator's path is
timed. No controller-manager runs, so Deployments get no pods. Usage:
    .venv/bin/python bench/alert_to_scale.py [--fleets 60]
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "operator"))

from operator_harness import OperatorProcess, install_chart  # noqa: E402
from support.kube_testbed import ControlPlane, free_port  # noqa: E402
from support.services import start_prometheus  # noqa: E402

from shoal.loadgen.report import percentile  # noqa: E402

TOKEN = "bench-token"
NAMESPACE = "bench"


def engine_page(fleets: int) -> bytes:
    """What Prometheus scrapes: one engine series set per fleet, labelled with a pod of that fleet."""
    lines = []
    for i in range(fleets):
        labels = f'model="m",pod="f{i:03d}-engine-0-0",namespace="{NAMESPACE}"'
        lines += [
            f"shoal_engine_requests_waiting{{{labels}}} 12",
            f"shoal_engine_requests_running{{{labels}}} 4",
            f"shoal_engine_kv_cache_usage_ratio{{{labels}}} 0.5",
        ]
    return ("\n".join(lines) + "\n").encode()


def serve_page(page: bytes) -> tuple[ThreadingHTTPServer, int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_: Any) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


def pod(name: str) -> dict[str, Any]:
    """An engine pod of fleet ``name`` bound to no node (no kubelet runs here); made Ready by a status patch."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-engine-0-0",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/instance": name,
                "app.kubernetes.io/component": "engine",
                "app.kubernetes.io/managed-by": "shoal-operator",
                "shoal.dev/inference-deployment": name,
            },
        },
        "spec": {"containers": [{"name": "engine", "image": "none"}], "nodeName": "nowhere"},
    }


def notification(name: str) -> dict[str, Any]:
    labels = {"alertname": "ShoalEngineQueueBacklog", "namespace": NAMESPACE, "infd": name, "severity": "warning"}
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": {},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": f"fp-{name}",
    }
    return {
        "version": "4",
        "groupKey": f'{{}}:{{infd="{name}"}}',
        "status": "firing",
        "receiver": "shoal",
        "groupLabels": {},
        "commonLabels": labels,
        "commonAnnotations": {},
        "externalURL": "",
        "alerts": [alert],
    }


def run(fleets: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="alert-bench-"))
    plane = ControlPlane(work / "kube")
    page_server, page_port = serve_page(engine_page(fleets))
    prometheus = start_prometheus(
        work / "prometheus",
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "engines",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{page_port}"]}],
                }
            ],
        },
    )
    operator = None
    try:
        plane.start()
        install_chart(plane)
        kubeconfig = plane.kubeconfig_for_service_account("shoal-system", "shoal", create=False).kubeconfig
        token_file, port = work / "token", free_port()
        token_file.write_text(TOKEN)
        operator = OperatorProcess(
            plane,
            kubeconfig,
            work / "operator.log",
            "--standalone",
            "--prometheus-url",
            prometheus.url,
            "--alerts-port",
            str(port),
            "--alerts-token-file",
            str(token_file),
            "--resync-seconds",
            "600",
        )
        operator.wait_ready()
        plane.kubectl("create", "namespace", NAMESPACE)
        items = []
        for i in range(fleets):
            name = f"f{i:03d}"
            items.append(
                {
                    "apiVersion": "shoal.dev/v1alpha1",
                    "kind": "InferenceDeployment",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {
                        "model": {"source": "smollm2-135m"},
                        "replicas": {"min": 1, "max": 4},
                        "autoscaling": {
                            "enabled": True,
                            "maxStep": 1,
                            "queueDepthPerReplica": 4,
                            "scaleUpStabilizationSeconds": 600,
                            "metrics": {"source": "prometheus"},
                        },
                    },
                }
            )
            items.append(pod(name))
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
        for i in range(fleets):  # the pods' Ready condition, as a kubelet would report it
            plane.kubectl(
                "patch",
                "pod",
                f"f{i:03d}-engine-0-0",
                "-n",
                NAMESPACE,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(
                    {
                        "status": {
                            "phase": "Running",
                            "conditions": [
                                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                            ],
                        }
                    }
                ),
            )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            engines = json.loads(plane.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json").stdout)["items"]
            if len([d for d in engines if d["metadata"]["name"].endswith("-engine")]) == fleets:
                break
            time.sleep(1)
        while not httpx.get(
            f"{prometheus.url}/api/v1/query", params={"query": "count(shoal_engine_requests_waiting)"}
        ).json()["data"]["result"]:
            time.sleep(0.5)

        url, headers = f"http://127.0.0.1:{port}/alerts", {"Authorization": f"Bearer {TOKEN}"}
        alert_ms, post_ms = [], []
        with httpx.Client(timeout=30) as client:
            client.post(url, json=notification("f000"), headers=headers)  # warm-up: connections, first import
            for i in range(1, fleets):
                start = time.perf_counter()
                answer = client.post(url, json=notification(f"f{i:03d}"), headers=headers)
                post_ms.append((time.perf_counter() - start) * 1000)
                alert_ms.append(float(answer.headers["Server-Timing"].split(",")[0].removeprefix("write;dur=")))
                if answer.json().get("evaluated") != [f"{NAMESPACE}/f{i:03d}"]:
                    raise RuntimeError(f"alert {i} not evaluated: {answer.status_code} {answer.text}")
        replicas = [
            d["spec"]["replicas"]
            for d in json.loads(plane.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json").stdout)["items"]
            if d["metadata"]["name"].endswith("-engine")
        ]

        write_ms = []
        admin = ssl.create_default_context(cafile=str(plane.ca_file))
        admin.load_cert_chain(str(plane.admin_cert_file), str(plane.admin_key_file))
        with httpx.Client(base_url=plane.url, verify=admin, timeout=30) as api:
            for i in range(1, fleets):
                path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/f{i:03d}-engine"
                start = time.perf_counter()
                api.patch(
                    path,
                    json={"spec": {"replicas": 3}},
                    params={"fieldManager": "bench"},
                    headers={"Content-Type": "application/merge-patch+json"},
                ).raise_for_status()
                write_ms.append((time.perf_counter() - start) * 1000)
        return {
            "fleets": fleets,
            "alerts": len(alert_ms),
            "scaled_to_2": sum(1 for r in replicas if r == 2),
            "receipt_to_write_ms": {
                "p50": percentile(alert_ms, 50),
                "p99": percentile(alert_ms, 99),
                "max": max(alert_ms),
            },
            "post_answered_ms": {"p50": percentile(post_ms, 50), "p99": percentile(post_ms, 99)},
            "bare_write_ms": {"p50": percentile(write_ms, 50), "p99": percentile(write_ms, 99)},
            "ratio_p50": statistics.median(alert_ms) / statistics.median(write_ms),
        }
    finally:
        if operator is not None:
            operator.stop()
        prometheus.stop()
        page_server.shutdown()
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleets", type=int, default=60)
    args = parser.parse_args()
    print(json.dumps(run(args.fleets), indent=2))


if __name__ == "__main__":
    main()
