"""The fake nodes stay Ready. kwok heartbeats them through Leases in kube-node-lease, renewed well inside the
controller-manager's 50 s node-monitor grace period. Without that the node lifecycle controller declares them
unreachable about once a minute and marks every pod on them NotReady, and kwok never readies a pod twice: a
Deployment that was not yet available stays unavailable, and an InferenceDeployment never becomes Ready."""

from __future__ import annotations

import pytest
from support.kube_testbed import NODE_LEASE_SECONDS, ControlPlane
from support.polling import eventually

pytestmark = pytest.mark.kube
NODES = {"gpu-node-0", "gpu-node-1"}


def renew_times(plane: ControlPlane) -> dict[str, str]:
    out = plane.kubectl(
        "get",
        "leases",
        "-n",
        "kube-node-lease",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.spec.renewTime}{'\\n'}{end}",
    ).stdout
    return dict(line.split("=", 1) for line in out.split())


def test_kwok_renews_a_lease_per_node(kube_cluster: ControlPlane) -> None:
    first = eventually(lambda: (times := renew_times(kube_cluster)).keys() >= NODES and times, 30, "a Lease per node")
    eventually(
        lambda: all(renew_times(kube_cluster)[node] != first[node] for node in NODES),
        NODE_LEASE_SECONDS,
        "every node's Lease renewed",
        detail=lambda: repr(renew_times(kube_cluster)),
    )
