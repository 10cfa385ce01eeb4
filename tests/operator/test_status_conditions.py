"""Status and conditions computed from the children, and the problems that make a fleet Degraded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from hypothesis import given
from hypothesis import strategies as st

from shoal.operator.diagnosis import check_model, diagnose, diagnose_pod
from shoal.operator.model_ready import model_ready
from shoal.operator.reconciler import Children, Reconciler
from shoal.operator.replicas import ScaleDecision
from shoal.operator.spec import MAX_SCALING_HISTORY, InferenceDeploymentSpec
from shoal.operator.standby_pool import PoolCount
from shoal.operator.status import compute_status, status_patch

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SPEC = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})


def deployment(replicas: int, ready: int, updated: int | None = None, generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": replicas if updated is None else updated,
        },
    }


def status(previous: dict[str, Any], now: datetime = T0, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(
        spec=SPEC,
        generation=1,
        previous=previous,
        decision=ScaleDecision(2, "replicas.count is 2"),
        engine=deployment(2, 2),
        gateway=deployment(1, 1),
        problem=None,
        selector="app.kubernetes.io/instance=x,app.kubernetes.io/component=engine",
        now=now,
    )
    return compute_status(**(args | kw))


def conditions(s: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in s["conditions"]}


def test_all_ready() -> None:
    s = status({})
    assert conditions(s) == {
        "Ready": ("True", "Ready"),
        "Progressing": ("False", "Stable"),
        "Degraded": ("False", "AsExpected"),
        "ModelReady": ("True", "LocalSource"),
    }
    assert (s["replicas"], s["readyReplicas"], s["desiredReplicas"], s["observedGeneration"]) == (2, 2, 2, 1)
    assert s["selector"].startswith("app.kubernetes.io/instance=x")


def test_rolling_out_and_not_ready() -> None:
    s = status({}, engine=deployment(2, 1, updated=1))
    assert conditions(s)["Ready"] == ("False", "EnginesNotReady")
    assert conditions(s)["Progressing"] == ("True", "RollingOut")
    assert conditions(status({}, engine=None))["Progressing"] == ("True", "Creating")
    assert conditions(status({}, gateway=deployment(1, 0)))["Ready"] == ("False", "GatewayNotReady")


def test_an_unchanged_world_yields_an_identical_status_later() -> None:
    first = status({})
    again = status(first, now=T0 + timedelta(minutes=5))
    assert again == first and status_patch(first, again) == {}


def test_transition_time_moves_only_with_the_condition_status() -> None:
    first = status({}, engine=deployment(2, 1))
    still = status(first, now=T0 + timedelta(seconds=30), engine=deployment(2, 1))
    ready = status(still, now=T0 + timedelta(seconds=60))
    times = lambda s: {c["type"]: c["lastTransitionTime"] for c in s["conditions"]}  # noqa: E731
    assert times(still) == times(first)
    assert times(ready)["Ready"] == "2026-01-01T12:01:00Z" and times(ready)["Degraded"] == times(first)["Degraded"]
    assert set(status_patch(still, ready)) == {"conditions", "readyReplicas"}


def test_problem_makes_degraded_with_its_message() -> None:
    problem = check_model("llama-9000")
    assert problem is not None
    s = status({}, problem=problem, engine=None, gateway=None)
    degraded = next(c for c in s["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ModelNotFound")
    assert "'llama-9000' is not a known model alias (known: smollm2-135m)" in degraded["message"]
    assert conditions(s)["Ready"] == ("False", "ModelNotFound")
    assert s["history"] == [], "nothing was scaled while the model cannot be found"


def test_metrics_and_limits_show_while_autoscaling() -> None:
    auto = SPEC.model_copy(update={"autoscaling": SPEC.autoscaling.model_copy(update={"enabled": True})})
    s = status({}, spec=auto, decision=ScaleDecision(4, "queue 9 > 4/replica", 9.0, 1.2, "TooManyReplicas"))
    assert conditions(s)["ScalingLimited"] == ("True", "TooManyReplicas")
    assert (s["queueDepth"], s["ttftP95Seconds"]) == (9.0, 1.2)
    s = status({}, spec=auto, decision=ScaleDecision(1, "MetricsMissing: holding"))
    assert conditions(s)["ScalingLimited"] == ("True", "MetricsMissing") and "queueDepth" not in s
    assert "ScalingLimited" not in conditions(status({}))


def test_drain_fits_checks_the_observed_pace_and_remembers_it() -> None:
    auto = SPEC.model_validate(
        {"model": {"source": "smollm2-135m"}, "engine": {"maxModelLen": 1000}, "autoscaling": {"enabled": True}}
    )
    before = status({}, spec=auto, decision=ScaleDecision(2, "steady"))
    assert conditions(before)["DrainFits"] == ("True", "AssumedTPOT") and "tpotP90Seconds" not in before
    slow = ScaleDecision(2, "steady", tpot_p90_seconds=0.4)  # 1000 tokens x 0.4 s x 1.2 = 480 s > the 300 s drain
    s = status(before, spec=auto, decision=slow, proposal=slow)
    assert conditions(s)["DrainFits"] == ("False", "GraceTooShort") and s["tpotP90Seconds"] == 0.4
    # a window without tokens (an idle fleet) keeps the last pace seen, so the condition does not flap
    idle = status(s, spec=auto, decision=ScaleDecision(2, "idle"), proposal=ScaleDecision(2, "idle"))
    assert conditions(idle)["DrainFits"] == ("False", "GraceTooShort") and idle["tpotP90Seconds"] == 0.4
    assert "DrainFits" not in conditions(status({}))  # measured only while autoscaling runs


@given(st.lists(st.integers(0, 6), min_size=1, max_size=40))
def test_history_records_each_change_and_stays_bounded(wishes: list[int]) -> None:
    current: dict[str, Any] = {}
    changes = []
    for step, wish in enumerate(wishes):
        before = current.get("desiredReplicas")
        now = T0 + timedelta(seconds=step)
        current = status(current, now=now, decision=ScaleDecision(wish, f"step {step}"), engine=deployment(wish, wish))
        if before != wish:
            changes.append((before or 0, wish, f"step {step}"))
    history = [(r["fromReplicas"], r["toReplicas"], r["reason"]) for r in current["history"]]
    assert history == changes[-MAX_SCALING_HISTORY:]
    assert current["lastScaleTime"] == current["history"][-1]["time"]


async def test_an_invalid_spec_is_degraded_with_the_same_condition_fields_as_any_other() -> None:
    """A spec the typed model rejects: Degraded carries lastTransitionTime and observedGeneration like every
    condition, and a second pass over the same spec writes nothing and announces nothing."""
    clock = iter([T0, T0 + timedelta(minutes=1)])
    reconciler = Reconciler(client=None, clock=lambda: next(clock))  # type: ignore[arg-type]  # never called here
    body = {
        "metadata": {"name": "x", "namespace": "ns", "uid": "u", "generation": 3},
        "spec": {"model": {"source": "smollm2-135m"}, "replicas": {"count": -1}},
        "status": status({}),
    }
    events: list[dict[str, Any]] = []
    patches = []
    for _ in range(2):
        patch = kopf.Patch()
        await reconciler.reconcile(
            kopf.Body(body),
            patch,
            Children(None, None, []),
            trigger="change",
            announce=lambda _, **event: events.append(event),
        )
        patches.append(dict(patch.get("status") or {}))
        body["status"] = {**body["status"], **patches[-1]}
    degraded = next(c for c in body["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec") and "spec.replicas" in degraded[
        "message"
    ]
    assert (degraded["lastTransitionTime"], degraded["observedGeneration"]) == ("2026-01-01T12:00:00Z", 3)
    assert [c["type"] for c in body["status"]["conditions"]] == ["Ready", "Progressing", "Degraded", "ModelReady"]
    assert patches[1] == {} and [e["reason"] for e in events] == ["InvalidSpec"]


def pod(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def test_image_pull_failure_is_named_with_the_kubelet_message() -> None:
    p = pod(
        "chat-engine-1",
        containerStatuses=[
            {
                "name": "engine",
                "image": "ghcr.io/x/nope:1",
                "state": {
                    "waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "ghcr.io/x/nope:1"'}
                },
            }
        ],
    )
    problem = diagnose_pod(p)
    assert problem is not None and problem.reason == "ImagePullFailed"
    assert problem.message == (
        "pod chat-engine-1: image 'ghcr.io/x/nope:1' cannot be pulled (ImagePullBackOff): "
        'Back-off pulling image "ghcr.io/x/nope:1"'
    )


def test_unschedulable_gpu_request_is_insufficient_gpu() -> None:
    scheduler = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available."
    p = pod(
        "chat-engine-2",
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduler}],
    )
    problem = diagnose_pod(p)
    assert problem is not None and problem.reason == "InsufficientGPU"
    assert problem.message == f"pod chat-engine-2 cannot be scheduled: {scheduler}"
    other = pod(
        "x",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 node(s) didn't match node selector.",
            }
        ],
    )
    assert diagnose_pod(other).reason == "Unschedulable"  # type: ignore[union-attr]


def test_healthy_pods_and_paths_are_not_problems() -> None:
    running = pod("ok", phase="Running", containerStatuses=[{"name": "engine", "state": {"running": {}}}])
    assert diagnose("smollm2-135m", [running]) is None
    for source in ("/models/llama/model.gguf", "hf://HuggingFaceTB/SmolLM2-135M", "pvc://weights/m", "s3://bucket/m"):
        assert check_model(source) is None, source
    assert diagnose("nope", [running]).reason == "ModelNotFound"  # type: ignore[union-attr]
    assert diagnose("weights.gguf", [running]).reason == "ModelNotFound"  # type: ignore[union-attr]  # not a path


def fetch_pod(name: str, **fetch_status: Any) -> dict[str, Any]:
    return pod(name, initContainerStatuses=[{"name": "fetch-model", **fetch_status}])


def test_model_ready_follows_the_fetch_init_containers() -> None:
    source = "s3://models/llama"

    def verdict(*pods: dict[str, Any]) -> tuple[bool, str, str]:
        return model_ready(source, pods)

    record = {"source": source, "path": "/model-cache/x", "bytes": 2048, "cached": True}
    fetched = fetch_pod("e-1", state={"terminated": {"exitCode": 0, "message": json.dumps(record)}})
    running = fetch_pod("e-2", state={"running": {}})
    assert verdict() == (False, "NoEnginePods", f"no engine pod runs to fetch {source}")
    assert verdict(running)[:2] == (False, "Fetching")
    assert verdict(fetched, running) == (
        True,
        "Fetched",
        f"{source}: 2.0 KiB (2048 bytes) in 1 of 2 engine pods (0 downloaded it, 1 found it cached)",
    )
    # no JSON line (FallbackToLogsOnError kept the log's tail): the message itself is the store's answer
    full = fetch_pod(
        "e-3", state={"terminated": {"exitCode": 1, "message": "OSError: [Errno 28] No space left on device"}}
    )
    assert verdict(fetched, full) == (
        False,
        "FetchFailed",
        f"pod e-3: fetching {source} failed: OSError: [Errno 28] No space left on device",
    )
    problem = diagnose(source, [fetched, full])
    assert problem is not None and problem.reason == "FetchFailed" and "No space left on device" in problem.message
    assert model_ready("pvc://weights/llama", []) == (
        True,
        "LocalSource",
        "pvc://weights/llama is read where it is: nothing to fetch",
    )


def test_a_missing_credentials_secret_is_named() -> None:
    message = 'secret "hub-token" not found'
    p = pod(
        "e-1",
        initContainerStatuses=[
            {"name": "fetch-model", "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}}}
        ],
    )
    problem = diagnose_pod(p)
    assert problem is not None and problem.reason == "ContainerConfigError"
    assert problem.message == f"pod e-1: container fetch-model cannot start: {message}"


def test_a_crash_loop_says_how_the_engine_last_ended() -> None:
    """The engine container's log tail (FallbackToLogsOnError) reaches the Degraded message: the last lines."""
    log = "\n".join(f"INFO line {i}" for i in range(20)) + "\nValueError: --max-model-len 9999999 exceeds the KV cache"
    p = pod(
        "chat-engine-3",
        containerStatuses=[
            {
                "name": "engine",
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": log}},
            }
        ],
    )
    problem = diagnose_pod(p)
    assert problem is not None and problem.reason == "CrashLoopBackOff"
    assert problem.message == (
        "pod chat-engine-3: container engine keeps crashing; last exit code 1 (Error): INFO line 16 | INFO line 17 | "
        "INFO line 18 | INFO line 19 | ValueError: --max-model-len 9999999 exceeds the KV cache"
    )
    oom = pod(
        "chat-engine-4",
        containerStatuses=[
            {
                "name": "engine",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }
        ],
    )
    assert diagnose_pod(oom).message.endswith("keeps crashing; last exit code 137 (OOMKilled)")  # type: ignore[union-attr]


def test_insufficient_gpu_follows_the_gpu_resource_name() -> None:
    scheduler = "0/2 nodes are available: 2 Insufficient amd.com/gpu."
    p = pod(
        "chat-engine-5",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduler}],
    )
    assert diagnose_pod(p, "amd.com/gpu").reason == "InsufficientGPU"  # type: ignore[union-attr]
    assert diagnose_pod(p).reason == "Unschedulable"  # type: ignore[union-attr]


def test_the_standby_pool_is_counted_apart_from_the_serving_engines() -> None:
    pooled = SPEC.model_validate({"model": {"source": "smollm2-135m"}, "autoscaling": {"enabled": True, "standby": 1}})
    # the Deployment runs 2 serving + 1 pool pod; the pool pod is still loading
    filling = status({}, spec=pooled, engine=deployment(3, 2), pool=PoolCount(pods=1, ready=0))
    assert conditions(filling)["StandbyPool"] == ("False", "Filling")
    assert conditions(filling)["Ready"] == ("True", "Ready")  # the serving engines are all ready
    assert conditions(filling)["Progressing"] == ("False", "Stable")  # 3 pods is what the Deployment should run
    assert (filling["replicas"], filling["readyReplicas"], filling["standbyReplicas"]) == (2, 2, 1)
    ready = status({}, spec=pooled, engine=deployment(3, 3), pool=PoolCount(pods=1, ready=1))
    assert conditions(ready)["StandbyPool"] == ("True", "Ready")
    assert (ready["replicas"], ready["readyReplicas"], ready["standbyReplicas"]) == (2, 2, 1)
    # a ready pool pod is no ready serving engine
    short = status({}, spec=pooled, engine=deployment(3, 2), pool=PoolCount(pods=1, ready=1))
    assert conditions(short)["Ready"] == ("False", "EnginesNotReady") and short["readyReplicas"] == 1
    assert conditions(status({}, spec=pooled, engine=deployment(2, 2)))["Progressing"] == ("True", "RollingOut")
    assert "StandbyPool" not in conditions(status({})) and "standbyReplicas" not in status({})
