"""The operator's FleetAutoscaler around a policy: a firing alert holds any scale-down and lets the policy act at
once, a resolved alert only ends that; a hung or failing source is missing data, never a crash or a made-up
zero; the CRD maps onto the policy's config (min 0 only with a gateway). Runs the real ShoalPolicy where its
behaviour is the point, and a scripted policy (a fake, named so) where the wrapper is."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from shoal.autoscale import FleetSignals, ReplicaSignals, ScalingDecision
from shoal.operator.autoscaler import FleetAutoscaler, FleetRef, autoscaling_config
from shoal.operator.spec import InferenceDeploymentSpec

KEY = ("team-a", "chat")


def fleet(**spec: object) -> FleetRef:
    body = {"model": {"source": "smollm2-135m"}, "autoscaling": {"enabled": True}, **spec}
    return FleetRef(*KEY, InferenceDeploymentSpec.model_validate(body))


@dataclass
class Observer:
    """A fake observer: ``waiting`` requests per ready replica, or a hang, or an error."""

    waiting: float = 0.0
    hang: bool = False
    fail: bool = False

    async def observe(self, ref: FleetRef, desired: int, now: float) -> FleetSignals:
        if self.hang:
            await asyncio.sleep(60)
        if self.fail:
            raise ConnectionError("prometheus: connection refused")
        replicas = tuple(ReplicaSignals(f"p{i}", "ready", 0.0, self.waiting, 0.0, 0.1) for i in range(desired))
        return FleetSignals(time=now, desired=desired, replicas=replicas, ttft_p95_seconds=0.1)

    def forget(self, key: tuple[str, str]) -> None:
        pass


class WantsOne:
    """A fake policy that always wants one replica (to see what the wrapper lets through)."""

    name = "wants-one"

    def __init__(self, _: object) -> None:
        self.signals: list[FleetSignals] = []

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        self.signals.append(signals)
        return ScalingDecision(signals.time, 1, "ScaleDownIdle", "idle", {"desired": float(signals.desired)})


def test_a_firing_alert_holds_scale_down_and_resolving_it_only_ends_that() -> None:
    policies: list[WantsOne] = []

    def make(config: object) -> WantsOne:
        policies.append(WantsOne(config))
        return policies[-1]

    scaler = FleetAutoscaler(Observer(), make, clock=lambda: 100.0)
    ref = fleet(replicas={"min": 1, "max": 4})
    assert scaler.alert(KEY, "fp1", firing=True) is True
    assert scaler.alert(KEY, "fp1", firing=True) is False, "the same alert again is no news"
    held = asyncio.run(scaler.evaluate(ref, 3))
    assert (held.replicas, held.rule) == (3, "HoldAlertFiring") and held.values["alert_firing"] == 1.0
    assert policies[0].signals[-1].alert_firing
    scaler.alert(KEY, "fp1", firing=False)
    after = asyncio.run(scaler.evaluate(ref, 3))
    assert (after.replicas, after.rule) == (1, "ScaleDownIdle") and "alert_firing" not in after.values
    assert len(policies) == 1, "the policy (and its history) lives across evaluations"


def test_the_real_policy_scales_up_at_once_under_an_alert_despite_its_up_window() -> None:
    observer, now = Observer(waiting=1.0), [0.0]
    scaler = FleetAutoscaler(observer, clock=lambda: now[0])
    ref = fleet(replicas={"min": 1, "max": 4}, autoscaling={"enabled": True, "scaleUpStabilizationSeconds": 600})
    for t in range(0, 60, 10):  # a minute of calm history in the up-window
        now[0] = float(t)
        assert asyncio.run(scaler.evaluate(ref, 1)).replicas == 1
    observer.waiting, now[0] = 12.0, 60.0
    assert asyncio.run(scaler.evaluate(ref, 1)).replicas == 1, "the up-window holds a new breach"
    scaler.alert(KEY, "fp", firing=True)
    now[0] = 61.0
    boosted = asyncio.run(scaler.evaluate(ref, 1))
    assert boosted.replicas > 1 and boosted.rule.startswith("ScaleUp")


def test_a_hung_or_failing_source_is_missing_data_never_a_crash() -> None:
    hung = FleetAutoscaler(Observer(hang=True), clock=lambda: 5.0, timeout_s=0.2)
    decision = asyncio.run(hung.evaluate(fleet(), 2))
    assert decision.replicas == 2 and decision.missing == "metrics source timed out after 0.2s"
    assert decision.queue_depth is None and decision.ttft_p95_seconds is None
    failing = FleetAutoscaler(Observer(fail=True), clock=lambda: 5.0)
    decision = asyncio.run(failing.evaluate(fleet(), 2))
    assert decision.replicas == 2 and "connection refused" in (decision.missing or "")


def test_the_crd_maps_onto_the_policy_config() -> None:
    spec = fleet(
        replicas={"min": 0, "max": 6},
        autoscaling={
            "enabled": True,
            "queueDepthPerReplica": 3,
            "ttftP95Seconds": 1.5,
            "scaleUpStabilizationSeconds": 5,
            "scaleDownStabilizationSeconds": 120,
            "maxStep": 3,
            "burstMemorySeconds": 0,
        },
    ).spec
    config = autoscaling_config(spec)
    assert (
        config.min_replicas,
        config.max_replicas,
        config.queue_depth_per_replica,
        config.ttft_p95_seconds,
        config.scale_up_stabilization_seconds,
        config.scale_down_stabilization_seconds,
        config.max_step,
        config.burst_memory_seconds,
    ) == (0, 6, 3, 1.5, 5, 120, 3, 0)
    no_gateway = fleet(replicas={"min": 0, "max": 6}, gateway={"replicas": 0}).spec
    assert autoscaling_config(no_gateway).min_replicas == 1
