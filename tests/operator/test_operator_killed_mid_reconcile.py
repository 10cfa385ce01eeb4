"""The operator SIGKILLed in the middle of creating an InferenceDeployment's children: the next operator converges
(every child exists once, owned, the status right, no orphan, no kopf progress annotation left behind).

"Mid-reconcile" is made deterministic by an admission webhook (``support.admission_gate``) that holds the
operator's write of the engine Deployment: by then the identity, policy and engine Service are applied and the
ConfigMap, the gateway and its Service are not. The operator is killed while that request is open; the apiserver
drops the call with its client (and the gate would refuse it), so the dead operator's last write never lands.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from operator_harness import (
    RELEASE_NAMESPACE,
    SERVICE_ACCOUNT,
    OperatorProcess,
    apply,
    children_of,
    condition,
    example,
    get,
    wait_ready,
)
from owned_objects import EXPECTED, orphans, owned_counts, stale_progress
from support.admission_gate import AdmissionGate
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(240)]

# below the session operator's 100: once the victim is dead, its peering entry (alive for kopf's 60 s lifetime)
# must not pause the operator that takes over (kopf pauses for a live peer of higher or equal priority)
VICTIM_PRIORITY = "60"


@pytest.fixture
def victim(
    installed_chart: ControlPlane, operator: OperatorProcess, operator_kubeconfig: Path, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The only operator running (the session one stops first, leaving the peering); the session operator is
    running again after the test, whatever happened."""
    operator.stop()
    process = OperatorProcess(
        installed_chart, operator_kubeconfig, tmp_path / "victim.log", "--priority", VICTIM_PRIORITY
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()
        forget_dead_peer(installed_chart, int(VICTIM_PRIORITY))
        if operator.process.poll() is not None:
            operator.restart()


def forget_dead_peer(plane: ControlPlane, priority: int) -> None:
    """A SIGKILLed operator cannot leave the peering object: its entry stays for kopf's 60 s lifetime, and the
    tests after this one count the peers. Removed here, as the survivors would once it expired."""
    peering = get(plane, "default", "clusterkopfpeering", "shoal") or {}
    dead = [key for key, peer in (peering.get("status") or {}).items() if peer.get("priority") == priority]
    if dead:
        patch = json.dumps({"status": dict.fromkeys(dead)})
        plane.kubectl("patch", "clusterkopfpeering", "shoal", "--type=merge", "-p", patch)


def test_the_next_operator_converges_after_a_kill_mid_reconcile(
    installed_chart: ControlPlane, operator: OperatorProcess, victim: OperatorProcess, namespace: str
) -> None:
    plane, user = installed_chart, f"system:serviceaccount:{RELEASE_NAMESPACE}:{SERVICE_ACCOUNT}"
    with AdmissionGate(plane, namespace, user) as gate:
        apply(plane, namespace, example("midway"))
        held = gate.wait_held()
        assert held == {"operation": "CREATE", "kind": "Deployment", "name": "midway-engine"}, gate.held
        os.killpg(victim.process.pid, signal.SIGKILL)
        victim.process.wait(10)
        gate.release(allow=False)
    children = children_of(plane, namespace, "midway")
    made = {key for key, child in children.items() if child is not None}
    assert {
        "serviceaccount/midway-gateway",
        "networkpolicy/midway-engine",
        "service/midway-engine",
        "secret/midway-api-keys",
    } <= made, made
    assert not made & {
        "deployment/midway-engine",
        "configmap/midway-gateway",
        "deployment/midway-gateway",
        "service/midway",
    }, made
    api_key = children["secret/midway-api-keys"]

    operator.restart()
    infd = wait_ready(plane, namespace, "midway")
    uid = infd["metadata"]["uid"]
    assert owned_counts(plane, namespace, uid) == EXPECTED
    assert orphans(plane, namespace, {uid}) == []
    assert stale_progress(get(plane, namespace, "infd", "midway") or {}) == {}
    status = infd["status"]
    assert (status["replicas"], status["readyReplicas"], status["observedGeneration"]) == (
        1,
        1,
        infd["metadata"]["generation"],
    )
    assert condition(infd, "Degraded")["status"] == "False"
    after = get(plane, namespace, "secret", "midway-api-keys")
    assert after is not None and after["data"] == api_key["data"], "the generated key is created once, never replaced"
    assert "Handler 'reconcile' succeeded" in operator.log()
