"""Lossless scale-in through the operator, counted: the chart's operator on the test bed, two engine pods run as
real ``shoal serve`` processes by the process node (``support.process_node``, a kubelet stand-in: kwok's pods run
nothing), the real ``shoal gateway`` following the engine Service's EndpointSlices with the gateway's own
ServiceAccount, and four official ``openai`` clients streaming through it. The spec goes from 2 replicas to 1:
the ReplicaSet deletes a pod, the EndpointSlice controller marks its endpoint terminating, the gateway stops
routing to it, the process node runs the pod's preStop sleep, then SIGTERM (the engine drains), then deletes it.
Every stream must end with ``finish_reason: length`` after exactly ``max_tokens`` tokens: zero failed, zero
truncated."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet_gateway import start_gateway
from operator_harness import apply, example, get
from support.kube_testbed import ControlPlane
from support.polling import eventually
from support.process_node import PodProcess, ProcessNode
from support.stream_load import StreamLoad, tokens_for_seconds

from shoal.engine_kinds import adapter
from shoal.local import metric, metric_values
from shoal.local.process import LocalProcess

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(420)]

NAME, MODEL = "scalein", "smollm2"
MAX_MODEL_LEN = 2048
# a stream (ignore_eos) long enough on this machine to outlast the preStop sleep (5 s), so SIGTERM finds requests
# in flight: SINGLE_STREAM_SECONDS of tokens at a lone request's rate, more under load
SINGLE_STREAM_SECONDS, MIN_TOKENS, MAX_TOKENS = 8.0, 128, 1900
RUNNING = adapter("shoal").metrics.running


def fleet_body(node: ProcessNode) -> dict[str, Any]:
    """Two fixed SmolLM2 engines on the process node; round-robin so both carry streams."""
    body = example(
        NAME,
        model={"source": "smollm2-135m", "servedName": MODEL},
        replicas={"min": 1, "max": 2, "count": 2},
        autoscaling={"enabled": False},
        gateway={"replicas": 1, "routingPolicy": "round-robin"},
    )
    body["spec"]["engine"] |= {"maxModelLen": MAX_MODEL_LEN, "maxNumSeqs": 4, **node.placement()}
    return body


def running(engine: PodProcess) -> float:
    """Requests the engine is running, from its ``/metrics``; 0 once its port is closed."""
    try:
        return metric(engine.url, RUNNING)
    except httpx.HTTPError:
        return 0.0


def backends_up(gateway: LocalProcess) -> int:
    return int(sum(metric_values(gateway.url, "shoal_gateway_backend_up").values()))


def test_a_scale_down_under_streaming_load_loses_no_request(
    operator: Any, process_node: ProcessNode, installed_chart: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    plane = installed_chart
    applied = time.monotonic()
    result = apply(plane, namespace, fleet_body(process_node))
    assert result.returncode == 0, result.stderr
    gateway, api_key = start_gateway(plane, namespace, NAME, tmp_path)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(gateway.stop)
        eventually(
            lambda: backends_up(gateway) == 2,
            240,
            "both engine processes ready and routed by the gateway",
            interval=1,
            detail=lambda: process_node.log_tail(1500) + "\n" + gateway.log(2000),
        )
        ready_at = time.monotonic()
        max_tokens = tokens_for_seconds(gateway.url, MODEL, SINGLE_STREAM_SECONDS, MIN_TOKENS, MAX_TOKENS, api_key)
        load = StreamLoad(gateway.url, clients=4, model=MODEL, max_tokens=max_tokens, api_key=api_key)
        load.start()
        cleanup.callback(load.stop)
        engines = [p for p in process_node.pods.values() if p.namespace == namespace]
        eventually(
            lambda: all(running(engine) > 0 for engine in engines) or load.failures,
            120,
            "streams running on both engines",
            interval=0.5,
        )
        assert not load.failures, load.summary()

        scaled_at = time.monotonic()
        patch = '{"spec":{"replicas":{"count":1}}}'
        plane.kubectl("patch", "infd", NAME, "-n", namespace, "--type=merge", "-p", patch)
        victim = eventually(
            lambda: next((p for p in engines if p.deleting), None), 30, "the ReplicaSet deleting one engine pod"
        )
        eventually(lambda: victim.sigterm_at, 60, f"SIGTERM to {victim.name} after its preStop sleep", interval=0.05)
        in_flight_at_sigterm = running(victim)
        eventually(lambda: victim.deleted, 300, f"{victim.name} drained and deleted", interval=0.5)
        gone_at = time.monotonic()
        eventually(
            lambda: get(plane, namespace, "pod", victim.name) is None, 30, "the pod object gone (deleted with grace 0)"
        )
        load.stop(after=time.monotonic())  # each client ends with a request sent after the scale-in
    print(
        f"\nscale-in under load ({max_tokens}-token streams): {load.summary()}; {in_flight_at_sigterm:.0f} "
        f"streams running on {victim.name} after SIGTERM; engines ready {ready_at - applied:.0f} s after the apply; scale-in to pod deleted "
        f"{gone_at - scaled_at:.1f} s; load ran {time.monotonic() - ready_at:.0f} s"
    )
    deployment = get(plane, namespace, "deployment", f"{NAME}-engine") or {}
    assert (deployment["spec"]["replicas"], deployment["status"]["replicas"]) == (1, 1), deployment["status"]
    assert not victim.killed, "the engine outlived its grace period and was SIGKILLed"
    assert "draining for up to" in victim.log_path.read_text(), "the engine's log shows no SIGTERM drain"
    assert in_flight_at_sigterm > 0, "the removed engine had nothing in flight at SIGTERM: the test proved nothing"
    assert sum(t > gone_at for t in load.finished_at) >= load.clients, "requests sent after the scale-in"
    assert load.failures == [], load.summary()
