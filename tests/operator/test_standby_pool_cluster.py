"""The standby pool on a cluster, counted: the chart's operator on the test bed, SmolLM2 engine pods run as real
``shoal serve`` processes by the process node (``support.process_node``, a kubelet stand-in), the real ``shoal
gateway`` following the engine Service's EndpointSlices, the official ``openai`` client through it.

``autoscaling.standby: 1`` with the autoscaler in mode Recommend, so the spec's ``replicas.count`` is the serving
count the test moves: at 1 the Deployment runs 2 pods, one labelled ``shoal.dev/pool=standby`` and no endpoint; at
2 that very pod (same uid) is promoted before the ReplicaSet's new pod is ready, is listed and serves a chat,
and the new pod ends in the pool; back at 1 (streams running across it) nothing is lost and the pool holds one.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from fleet_gateway import start_gateway
from operator_harness import apply, condition, example, get
from support.kube_testbed import ControlPlane
from support.polling import eventually
from support.process_node import ProcessNode
from support.stream_load import StreamLoad

from shoal.engine_kinds import adapter
from shoal.local import metric, metric_values
from shoal.local.process import LocalProcess
from shoal.operator.standby_pool import POOL_LABEL, SERVING, STANDBY

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(420)]

NAME, MODEL = "standby", "smollm2"
ENGINE_PODS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=engine"
FINISHED = f"{adapter('shoal').metrics.finished}_total"  # the counter's sample
STREAM_TOKENS = 48


def fleet_body(node: ProcessNode, count: int) -> dict[str, Any]:
    body = example(
        NAME,
        model={"source": "smollm2-135m", "servedName": MODEL},
        replicas={"min": 1, "max": 2, "count": count},
        autoscaling={"enabled": True, "mode": "Recommend", "standby": 1},
        gateway={"replicas": 1, "routingPolicy": "round-robin"},
    )
    body["spec"]["engine"] |= {"maxModelLen": 512, "maxNumSeqs": 4, **node.placement()}
    return body


def live_pods(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    """The engine pods not being deleted."""
    pods = (get(plane, namespace, "pods", "-l", ENGINE_PODS) or {}).get("items", [])
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pool(pod: dict[str, Any]) -> str | None:
    return pod["metadata"].get("labels", {}).get(POOL_LABEL)


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def by_pool(pods: list[dict[str, Any]], which: str) -> list[dict[str, Any]]:
    return [p for p in pods if pool(p) == which]


def endpoint_ips(plane: ControlPlane, namespace: str) -> set[str]:
    """The ready addresses the engine Service's EndpointSlices list: what the gateway routes to."""
    selector = f"kubernetes.io/service-name={NAME}-engine"
    slices = (get(plane, namespace, "endpointslices", "-l", selector) or {}).get("items", [])
    return {
        address
        for s in slices
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready")
        for address in e["addresses"]
    }


def backends_up(gateway: LocalProcess) -> int:
    return int(sum(metric_values(gateway.url, "shoal_gateway_backend_up").values()))


def settled(plane: ControlPlane, namespace: str, serving: int) -> list[dict[str, Any]] | None:
    """The pods once ``serving`` ready pods serve and one ready pod waits in the pool, and nothing else runs."""
    pods = live_pods(plane, namespace)
    if len(pods) != serving + 1 or not all(ready(p) for p in pods):
        return None
    if len(by_pool(pods, SERVING)) != serving or len(by_pool(pods, STANDBY)) != 1:
        return None
    return pods


def counted(plane: ControlPlane, namespace: str) -> tuple[Any, ...]:
    """The status's (replicas, readyReplicas, standbyReplicas, StandbyPool's status)."""
    infd = get(plane, namespace, "infd", NAME) or {}
    status = infd.get("status", {})
    fields = (status.get(k) for k in ("replicas", "readyReplicas", "standbyReplicas"))
    return (*fields, condition(infd, "StandbyPool").get("status"))


def chat(url: str, api_key: str) -> None:
    api = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120)
    api.chat.completions.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}])


def set_count(plane: ControlPlane, namespace: str, count: int) -> None:
    patch = f'{{"spec":{{"replicas":{{"count":{count}}}}}}}'
    plane.kubectl("patch", "infd", NAME, "-n", namespace, "--type=merge", "-p", patch)


def test_the_pool_waits_unrouted_is_promoted_on_a_scale_up_and_refilled(
    operator: Any, process_node: ProcessNode, installed_chart: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    plane = installed_chart
    result = apply(plane, namespace, fleet_body(process_node, count=1))
    assert result.returncode == 0, result.stderr
    gateway, api_key = start_gateway(plane, namespace, NAME, tmp_path)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(gateway.stop)
        detail = lambda: process_node.log_tail(1500) + "\n" + operator.log()[-2000:]  # noqa: E731
        pods = eventually(lambda: settled(plane, namespace, 1), 240, "1 serving + 1 standby pod ready", detail=detail)
        (serving,), (waiting,) = by_pool(pods, SERVING), by_pool(pods, STANDBY)
        assert endpoint_ips(plane, namespace) == {serving["status"]["podIP"]}, "the pool pod is no endpoint"
        eventually(lambda: backends_up(gateway) == 1, 60, "the gateway routing to the serving engine only")
        eventually(lambda: counted(plane, namespace) == (1, 1, 1, "True"), 30, "the status counting the pool apart")
        assert (get(plane, namespace, "deployment", f"{NAME}-engine") or {})["spec"]["replicas"] == 2

        # scale-up: the ready pool pod is promoted (same uid) before the ReplicaSet's new pod is ready
        scaled_at = time.monotonic()
        set_count(plane, namespace, 2)
        pool_ip, pool_uid = waiting["status"]["podIP"], waiting["metadata"]["uid"]
        eventually(lambda: pool_ip in endpoint_ips(plane, namespace), 30, "the pool pod listed as an endpoint")
        listed_at = time.monotonic()
        pods = live_pods(plane, namespace)
        promoted = next(p for p in pods if p["metadata"]["uid"] == pool_uid)
        assert pool(promoted) == SERVING
        new = [p for p in pods if p["metadata"]["uid"] not in (pool_uid, serving["metadata"]["uid"])]
        assert not any(ready(p) for p in new), "the promotion waited for a cold start"
        eventually(lambda: backends_up(gateway) == 2, 60, "the gateway routing to the promoted engine")
        promoted_url = next(p.url for p in process_node.pods.values() if p.uid == pool_uid)
        before = metric(promoted_url, FINISHED)
        for _ in range(4):  # round-robin over the two serving engines
            chat(gateway.url, api_key)
        assert metric(promoted_url, FINISHED) > before, "the promoted engine served no chat"
        pods = eventually(lambda: settled(plane, namespace, 2), 240, "the new pod ready in the pool", detail=detail)
        assert pool_uid in {p["metadata"]["uid"] for p in by_pool(pods, SERVING)}
        assert by_pool(pods, STANDBY)[0]["metadata"]["uid"] not in (pool_uid, serving["metadata"]["uid"])
        assert len(endpoint_ips(plane, namespace)) == 2
        pooled_uid = by_pool(pods, STANDBY)[0]["metadata"]["uid"]

        # scale-in under streams: a serving pod is demoted or deleted, the pool stays one, nothing is lost
        load = StreamLoad(gateway.url, clients=2, model=MODEL, max_tokens=STREAM_TOKENS, api_key=api_key)
        load.start()
        cleanup.callback(load.stop)
        eventually(lambda: load.completed >= 2 or load.failures, 120, "streams completing before the scale-in")
        set_count(plane, namespace, 1)
        pods = eventually(lambda: settled(plane, namespace, 1), 240, "back to 1 serving + 1 standby", detail=detail)
        eventually(lambda: len(endpoint_ips(plane, namespace)) == 1, 60, "one endpoint left")
        load.stop(after=time.monotonic())  # each client ends with a request sent after the scale-in settled
    kept = {p["metadata"]["uid"] for p in pods}
    victim = "the pool pod, so a serving pod was demoted" if pooled_uid not in kept else "a serving pod (drained)"
    print(
        f"\nstandby pool: promoted pod listed {listed_at - scaled_at:.1f} s after the scale-up's patch; "
        f"scale-in under streams (the ReplicaSet deleted {victim}): {load.summary()}"
    )
    assert load.failures == [], load.summary()
    eventually(lambda: counted(plane, namespace) == (1, 1, 1, "True"), 30, "the status after the scale-in")
    assert (get(plane, namespace, "deployment", f"{NAME}-engine") or {})["spec"]["replicas"] == 2
