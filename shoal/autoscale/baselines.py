"""The peers' autoscaling policies as :class:`ScalingPolicy` objects, with their projects' real defaults, so the
fleet simulator compares Shoal's policy with what users run today on the same trace and the same fleet.

- :class:`HPAStyle`: the Kubernetes HorizontalPodAutoscaler (v2) on a per-pod metric, here the requests in each
  engine (running + waiting) against a per-replica target: ``desired = ceil(sum(metric) / target)``, tolerance 0.1,
  a 15 s sync, scale-up by at most max(4 pods, 100%) per 15 s, a 300 s scale-down stabilization (the largest
  recommendation of the last 300 s wins), and pods without metrics yet (still loading) counted as 0 on scale-up
  and as exactly on target on scale-down.
- :class:`KEDAStyle`: the vLLM production-stack KEDA recipe: a Prometheus trigger on ``vllm:num_requests_waiting``
  with threshold 5, 15 s polling, 360 s cooldown. KEDA feeds an HPA underneath (AverageValue 5 per pod, the HPA
  defaults above); the cooldown applies, as in KEDA, only to the last step to zero.
- :class:`KPAStyle`: Knative's KPA on concurrency (running + waiting): a 60 s stable window and a 6 s panic window
  averaged over 2 s ticks, a 70% target utilization, panic when the panic window wants at least 2x the ready
  pods, no scale-down while panicking (which lasts until a full stable window without a breach), scale-down by at
  most half the ready pods per tick, scale-up by at most 1000x.
- :class:`FixedForPeak`: a constant fleet; the caller sizes it for the trace's peak.

Each class carries ``period_seconds``, the interval its controller evaluates at; the simulator calls it at that
interval. Like Shoal's policy these read no clock: all time comes from ``FleetSignals.time``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.autoscale.config import AutoscalingConfig
from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.signals import FleetSignals, ReplicaSignals
from shoal.autoscale.window import WindowExtreme

HPA_TOLERANCE = 0.1
HPA_SYNC_SECONDS = 15.0
HPA_SCALE_UP_PODS = 4
HPA_SCALE_UP_PERCENT = 100.0
HPA_SCALE_DOWN_STABILIZATION_SECONDS = 300.0
KEDA_WAITING_THRESHOLD = 5.0
KEDA_POLLING_SECONDS = 15.0
KEDA_COOLDOWN_SECONDS = 360.0
KPA_TICK_SECONDS = 2.0
KPA_STABLE_WINDOW_SECONDS = 60.0
KPA_PANIC_WINDOW_SECONDS = 6.0
KPA_PANIC_THRESHOLD = 2.0
KPA_TARGET_UTILIZATION = 0.7
KPA_MAX_SCALE_UP_RATE = 1000.0
KPA_MAX_SCALE_DOWN_RATE = 2.0


def _clamp(replicas: int, config: AutoscalingConfig) -> int:
    return max(config.min_replicas, min(config.max_replicas, replicas))


def _in_engine(replica: ReplicaSignals) -> float | None:
    """Requests a replica holds (running + waiting); None when it reported no queue."""
    if replica.waiting is None:
        return None
    return replica.waiting + (replica.running or 0.0)


def hpa_recommend(
    signals: FleetSignals, metric: Callable[[ReplicaSignals], float | None], target: float
) -> tuple[int, float, float]:
    """HPA's replica calculator on one per-pod metric against an AverageValue ``target``: (raw recommendation,
    usage ratio, metric total), with the tolerance and the treatment of pods without metrics (see the module
    docstring)."""
    current = signals.desired
    pods = [r for r in signals.replicas if r.phase != "draining"]
    values = [metric(r) if r.phase == "ready" else None for r in pods]
    known = [v for v in values if v is not None]
    missing = len(values) - len(known)
    total = sum(known)
    if not known:
        return current, 1.0, total
    ratio = total / (len(known) * target)
    if missing == 0:
        if abs(ratio - 1.0) <= HPA_TOLERANCE:
            return current, ratio, total
        return math.ceil(ratio * len(known)), ratio, total
    # Pods without metrics: 0 when scaling up, exactly on target when scaling down.
    assumed = 0.0 if ratio > 1.0 else target
    new_ratio = (total + assumed * missing) / (len(values) * target)
    if abs(new_ratio - 1.0) <= HPA_TOLERANCE or (ratio > 1.0) != (new_ratio > 1.0):
        return current, new_ratio, total
    return math.ceil(new_ratio * len(values)), new_ratio, total


@dataclass
class HPAStyle:
    """Kubernetes' HPA algorithm (``replica_calculator.go`` and the default ``behavior``), see the module docstring."""

    config: AutoscalingConfig
    target_per_replica: float
    name: str = "hpa"
    period_seconds: float = HPA_SYNC_SECONDS
    _down_window: WindowExtreme = field(init=False)
    _started: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.target_per_replica <= 0:
            raise ValueError(f"target_per_replica must be > 0, got {self.target_per_replica}")
        self._down_window = WindowExtreme(HPA_SCALE_DOWN_STABILIZATION_SECONDS, largest=True)

    def metric(self, replica: ReplicaSignals) -> float | None:
        return _in_engine(replica)

    def recommend(self, signals: FleetSignals) -> tuple[int, float, float]:
        """The raw recommendation (before stabilization and rate limits), the usage ratio and the metric total."""
        return hpa_recommend(signals, self.metric, self.target_per_replica)

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        current = signals.desired
        raw, ratio, total = self.recommend(signals)
        if not self._started:  # as the HPA controller does, the window starts with the current count
            self._down_window.add(signals.time, current)
            self._started = True
        stabilized = self._down_window.add(signals.time, raw)
        if raw > current:
            limit = max(current + HPA_SCALE_UP_PODS, math.ceil(current * (1 + HPA_SCALE_UP_PERCENT / 100)))
            wanted, rule = min(raw, limit), "ScaleUp"
        elif raw < current:
            wanted, rule = min(int(stabilized), current), "ScaleDown" if stabilized < current else "HoldStabilization"
        else:
            wanted, rule = current, "HoldTolerance"
        replicas = _clamp(wanted, self.config)
        values = {"metric_total": total, "ratio": ratio, "raw": float(raw), "target": self.target_per_replica}
        message = (
            f"{self.name}: metric total {total:g} over target {self.target_per_replica:g}/replica "
            f"(ratio {ratio:.2f}) recommends {raw}, applying {replicas}"
        )
        return ScalingDecision(signals.time, replicas, rule, message, values)


@dataclass
class KEDAStyle(HPAStyle):
    """The production-stack KEDA recipe: waiting requests, threshold 5 per pod, an HPA underneath."""

    target_per_replica: float = KEDA_WAITING_THRESHOLD
    name: str = "keda"
    period_seconds: float = KEDA_POLLING_SECONDS
    cooldown_seconds: float = KEDA_COOLDOWN_SECONDS
    _last_active: float | None = field(default=None, init=False)

    def metric(self, replica: ReplicaSignals) -> float | None:
        return replica.waiting

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        decision = super().decide(signals)
        active = signals.held_requests > 0 or any((r.waiting or 0) > 0 for r in signals.replicas)
        if active or self._last_active is None:
            self._last_active = signals.time
        if signals.held_requests > 0 and decision.replicas == 0:
            return ScalingDecision(
                signals.time,
                max(1, self.config.min_replicas),
                "ScaleFromZero",
                f"{self.name}: {signals.held_requests} requests held with no replica",
            )
        if decision.replicas == 0 and signals.time - self._last_active < self.cooldown_seconds:
            return ScalingDecision(
                signals.time,
                min(1, signals.desired),
                "HoldCooldown",
                f"{self.name}: idle for less than the {self.cooldown_seconds:g} s cooldown",
                decision.values,
            )
        return decision


@dataclass
class KPAStyle:
    """Knative's KPA (``autoscaler.go``'s ``Scale``), see the module docstring."""

    config: AutoscalingConfig
    target_per_replica: float
    name: str = "kpa"
    period_seconds: float = KPA_TICK_SECONDS
    stable_window_seconds: float = KPA_STABLE_WINDOW_SECONDS
    panic_window_seconds: float = KPA_PANIC_WINDOW_SECONDS
    _samples: deque[tuple[float, float]] = field(default_factory=deque, init=False)
    _panic_since: float | None = field(default=None, init=False)
    _max_panic_pods: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.target_per_replica <= 0:
            raise ValueError(f"target_per_replica must be > 0, got {self.target_per_replica}")

    def _averages(self, now: float, concurrency: float) -> tuple[float, float]:
        samples = self._samples
        samples.append((now, concurrency))
        while samples[0][0] <= now - self.stable_window_seconds:
            samples.popleft()
        stable = sum(c for _, c in samples) / len(samples)
        panic = [c for t, c in samples if t > now - self.panic_window_seconds]
        return stable, sum(panic) / len(panic)

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        now = signals.time
        concurrency = sum(_in_engine(r) or 0.0 for r in signals.ready) + signals.held_requests
        stable, panic = self._averages(now, concurrency)
        ready = max(1, len(signals.ready))
        per_pod = self.target_per_replica * KPA_TARGET_UTILIZATION
        max_up = math.ceil(KPA_MAX_SCALE_UP_RATE * ready)
        max_down = math.floor(ready / KPA_MAX_SCALE_DOWN_RATE)
        want_stable = min(max(math.ceil(stable / per_pod), max_down), max_up)
        want_panic = min(max(math.ceil(panic / per_pod), max_down), max_up)
        if want_panic / ready >= KPA_PANIC_THRESHOLD:
            self._panic_since = now
        elif self._panic_since is not None and now > self._panic_since + self.stable_window_seconds:
            self._panic_since = None
            self._max_panic_pods = 0
        if self._panic_since is not None:
            wanted, rule = max(want_panic, self._max_panic_pods), "Panic"
            self._max_panic_pods = wanted
        else:
            wanted, rule = want_stable, "Stable"
        replicas = _clamp(wanted, self.config)
        values = {
            "stable_concurrency": stable,
            "panic_concurrency": panic,
            "ready": float(len(signals.ready)),
            "target": per_pod,
        }
        message = (
            f"{self.name}: concurrency {stable:.1f} stable / {panic:.1f} panic over "
            f"{per_pod:g} per pod wants {wanted}, applying {replicas}"
        )
        return ScalingDecision(now, replicas, rule, message, values)


@dataclass
class FixedForPeak:
    """A constant fleet (``replicas``, sized by the caller for the peak): what a team does without an autoscaler."""

    replicas: int
    name: str = "fixed"
    period_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {self.replicas}")

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        return ScalingDecision(signals.time, self.replicas, "Fixed", f"{self.name}: always {self.replicas} replicas")
