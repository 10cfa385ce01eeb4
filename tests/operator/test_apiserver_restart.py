"""The kube-apiserver killed and started again (same address, certificates and etcd) while the operator is
applying a change to an InferenceDeployment: the operator reconnects by itself, converges the change, and
creates no duplicate objects; the status conditions are true again. The lost write is retried seconds later
(it waited kopf's default 60 s for any handler exception before, 65 s to converge after an 8 s outage).

The change is caught in flight by an admission webhook (``support.admission_gate``) that holds the operator's
update of the engine Deployment; the apiserver is killed while that request is open, so the write is lost with it.
This restarts the session's apiserver (the controllers and kwok reconnect too); the test ends only once the fake
nodes are Ready again, so the tests after it find the cluster as it was.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from operator_harness import (
    RELEASE_NAMESPACE,
    SERVICE_ACCOUNT,
    OperatorProcess,
    apply,
    condition,
    eventually,
    example,
    get,
    wait_ready,
)
from owned_objects import EXPECTED, orphans, owned_counts, stale_progress
from support.admission_gate import AdmissionGate
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]


def engine_args(plane: ControlPlane, namespace: str, name: str) -> list[str]:
    engine = get(plane, namespace, "deployment", f"{name}-engine") or {}
    return list(engine["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_operator_converges_a_change_across_an_apiserver_restart(
    kube_cluster: ControlPlane, installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    plane, user = installed_chart, f"system:serviceaccount:{RELEASE_NAMESPACE}:{SERVICE_ACCOUNT}"
    log_start = len(operator.log())
    apply(plane, namespace, example("steadfast"))
    uid = wait_ready(plane, namespace, "steadfast")["metadata"]["uid"]
    changed = example("steadfast", replicas={"count": 2})
    changed["spec"]["engine"]["maxNumSeqs"] = 8
    with AdmissionGate(plane, namespace, user) as gate:
        apply(plane, namespace, changed)
        held = gate.wait_held()
        assert (held["operation"], held["name"]) == ("UPDATE", "steadfast-engine"), gate.held
        plane.stop_apiserver()
        gate.release(allow=True)  # nobody is waiting for this answer any more; later writes pass
        down_at = time.monotonic()
        plane.restart_apiserver()
        restarted_in = time.monotonic() - down_at

    def converged() -> dict[str, Any] | None:
        infd = get(plane, namespace, "infd", "steadfast") or {}
        status, args = infd.get("status") or {}, engine_args(plane, namespace, "steadfast")
        done = (
            args[args.index("--max-num-seqs") + 1] == "8"
            and status.get("readyReplicas") == 2
            and status.get("observedGeneration") == infd["metadata"]["generation"]
        )
        return infd if done else None

    eventually(
        converged,
        180,
        "the change applied and 2 engines ready",
        detail=lambda: str(get(plane, namespace, "infd", "steadfast")),
    )
    converged_in = time.monotonic() - down_at
    infd = wait_ready(plane, namespace, "steadfast")
    status = infd["status"]
    assert (status["desiredReplicas"], status["replicas"], status["readyReplicas"]) == (2, 2, 2), status
    assert status["observedGeneration"] == infd["metadata"]["generation"]
    assert condition(infd, "Ready")["status"] == "True" and condition(infd, "Degraded")["status"] == "False"
    assert owned_counts(plane, namespace, uid) == EXPECTED
    assert orphans(plane, namespace, {uid}) == []
    assert stale_progress(infd) == {}
    assert operator.process.poll() is None, "the operator kept running across the outage"
    log = operator.log()[log_start:]
    assert "the apiserver could not be reached" in log, log[-3000:]
    assert "try again in 60" not in log, "an unreachable apiserver is retried within seconds, not kopf's minute"
    eventually(plane.nodes_ready, 120, "the fake nodes Ready again after the restart")
    print(f"apiserver back in {restarted_in:.1f} s; change converged {converged_in:.1f} s after the kill")
