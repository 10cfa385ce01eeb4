"""The peers' current autoscaling laws (issue 33) as :class:`ScalingPolicy` objects, each from its published law and
defaults, so the simulator judges Shoal's policy against what llm-d, Dynamo and AIBrix users run today.

- :class:`LlmdSLO`: llm-d's SLO-aware KEDA law. A score ``s = avg45s(min(max(P90 TTFT / 3 s, P90 TPOT / 100 ms),
  2))``; up when ``s > 0.55`` by ``n * (s * c / 0.55 - 1)`` with ``c = ready / provisioned``, down when
  ``s < 0.40`` by ``n * (1 - s / 0.40)``, in between hold; the HPA under KEDA adds at most max(100%, 4 pods) per
  60 s and removes at most 1 pod per 120 s, after HPA's default 300 s scale-down stabilization. A window without
  a first token (or a finished request) contributes 0 for that term: no latency was seen.
- :class:`LlmdQueue`: llm-d's queue recipe: two KEDA triggers on the EPP's queue, ``sum waiting`` at 1 per
  replica and ``sum running`` at 16 per replica; the HPA takes the larger, ``max(ceil(sum waiting / 1),
  ceil(sum running / 16))``, polled every 15 s, with the 300 s windows (HPA's scale-down stabilization, KEDA's
  cooldown to zero).
- :class:`DynamoPlanner`: NVIDIA Dynamo's planner: every 180 s a floor from a load forecast, ``ceil(forecast
  request rate / one replica's rate at the SLO)``, and every 5 s a step of +1 when the fleet's TTFT or ITL
  (here the observed P90s, standing in for the planner's estimates) is over the SLA, -1 when both are under half
  of it, never below the floor. Dynamo forecasts with ARIMA by default; this uses Holt's linear exponential
  smoothing (level and trend, alpha 0.5, beta 0.3) on each interval's mean rate, a simpler documented stand-in.
  A step waits for replicas still starting, as the planner waits for its last scaling to finish.
- :class:`AIBrixKPA`: AIBrix's KPA: Knative's law (:class:`~shoal.autoscale.baselines.KPAStyle`) with
  ``max(reactive, projected)``, where ``projected`` sizes for the concurrency a least-squares line through the
  last 120 s of samples reaches 120 s ahead.

Like every policy here they read no clock and do no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from shoal.autoscale.baselines import HPA_SCALE_DOWN_STABILIZATION_SECONDS, KPAStyle, hpa_recommend
from shoal.autoscale.config import AutoscalingConfig
from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.forecast import trend_projection
from shoal.autoscale.signals import FleetSignals, ReplicaSignals
from shoal.autoscale.window import WindowExtreme

LLMD_TTFT_SLO_S = 3.0
LLMD_TPOT_SLO_S = 0.1
LLMD_SCORE_CAP = 2.0
LLMD_SCORE_WINDOW_S = 45.0
LLMD_UP_THRESHOLD = 0.55
LLMD_DOWN_THRESHOLD = 0.40
LLMD_POLL_S = 15.0
LLMD_UP_PODS, LLMD_UP_PERCENT, LLMD_UP_PERIOD_S = 4, 100.0, 60.0
LLMD_DOWN_PODS, LLMD_DOWN_PERIOD_S = 1, 120.0
LLMD_QUEUE_WAITING_TARGET = 1.0
LLMD_QUEUE_RUNNING_TARGET = 16.0
LLMD_QUEUE_WINDOW_S = 300.0
DYNAMO_INTERVAL_S = 180.0
DYNAMO_STEP_S = 5.0
DYNAMO_ITL_SLA_S = 0.1
DYNAMO_DOWN_FRACTION = 0.5
HOLT_ALPHA, HOLT_BETA = 0.5, 0.3
AIBRIX_HORIZON_S = 120.0


def _clamp(replicas: int, config: AutoscalingConfig) -> int:
    return max(config.min_replicas, min(config.max_replicas, replicas))


def llmd_score(ttft_p90_s: float | None, tpot_p90_s: float | None, ttft_slo_s: float = LLMD_TTFT_SLO_S) -> float:
    """One sample of llm-d's SLO score: the worse of the two latencies over its SLO, capped at 2."""
    ttft = (ttft_p90_s or 0.0) / ttft_slo_s
    tpot = (tpot_p90_s or 0.0) / LLMD_TPOT_SLO_S
    return min(max(ttft, tpot), LLMD_SCORE_CAP)


def llmd_desired(n: int, score: float, ready_fraction: float) -> int:
    """llm-d's law on the averaged score: up by ``n * (s * c / 0.55 - 1)``, down by ``n * (1 - s / 0.40)``."""
    if score > LLMD_UP_THRESHOLD:
        return n + max(0, math.ceil(n * (score * ready_fraction / LLMD_UP_THRESHOLD - 1)))
    if score < LLMD_DOWN_THRESHOLD:
        return n - math.floor(n * (1 - score / LLMD_DOWN_THRESHOLD))
    return n


@dataclass
class RateLimits:
    """HPA ``behavior`` policies (``calculateScaleUpLimitWithScalingRules``): what was added in the last up period
    (removed in the last down period) counts against the limit, from the count at that period's start."""

    up_pods: int
    up_percent: float
    up_period_s: float
    down_pods: int | None  # None: no limit on scale-down (HPA's default 100% per period)
    down_period_s: float
    _changes: deque[tuple[float, int]] = field(default_factory=deque, init=False)

    def limit(self, now: float, current: int, wanted: int) -> int:
        while self._changes and self._changes[0][0] <= now - max(self.up_period_s, self.down_period_s):
            self._changes.popleft()
        added = sum(d for t, d in self._changes if d > 0 and t > now - self.up_period_s)
        removed = -sum(d for t, d in self._changes if d < 0 and t > now - self.down_period_s)
        start_up, start_down = current - added, current + removed
        high = max(start_up + self.up_pods, math.ceil(start_up * (1 + self.up_percent / 100)))
        low = 0 if self.down_pods is None else start_down - self.down_pods
        if wanted > current:
            applied = max(current, min(wanted, high))
        else:
            applied = min(current, max(wanted, low, 0))
        if applied != current:
            self._changes.append((now, applied - current))
        return applied


@dataclass
class HPABehavior:
    """What the HPA under KEDA does to a recommendation: the largest of the last ``stabilization_s`` seconds on
    scale-down (starting with the count it found, as the controller does), then the ``behavior`` rate limits."""

    limits: RateLimits
    stabilization_s: float = HPA_SCALE_DOWN_STABILIZATION_SECONDS
    _window: WindowExtreme | None = field(default=None, init=False)

    def apply(self, now: float, current: int, raw: int) -> int:
        if self._window is None:
            self._window = WindowExtreme(self.stabilization_s, largest=True)
            self._window.add(now, current)
        stabilized = int(self._window.add(now, raw))
        wanted = raw if raw >= current else min(stabilized, current)
        return self.limits.limit(now, current, wanted)


@dataclass
class LlmdSLO:
    """llm-d's SLO-aware KEDA law, see the module docstring; ``ttft_slo_s`` is the team's TTFT SLO (3 s in llm-d's
    recipe)."""

    config: AutoscalingConfig
    ttft_slo_s: float = LLMD_TTFT_SLO_S
    name: str = "llmd-slo"
    period_seconds: float = LLMD_POLL_S
    _samples: deque[tuple[float, float]] = field(default_factory=deque, init=False)
    _behavior: HPABehavior = field(init=False)

    def __post_init__(self) -> None:
        if self.ttft_slo_s <= 0:
            raise ValueError(f"ttft_slo_s must be > 0, got {self.ttft_slo_s}")
        limits = RateLimits(LLMD_UP_PODS, LLMD_UP_PERCENT, LLMD_UP_PERIOD_S, LLMD_DOWN_PODS, LLMD_DOWN_PERIOD_S)
        self._behavior = HPABehavior(limits)

    def score(self, signals: FleetSignals) -> float:
        """The score averaged over the last 45 s of samples, this one included."""
        now = signals.time
        self._samples.append((now, llmd_score(signals.ttft_p90_seconds, signals.tpot_p90_seconds, self.ttft_slo_s)))
        while self._samples[0][0] <= now - LLMD_SCORE_WINDOW_S:
            self._samples.popleft()
        return sum(s for _, s in self._samples) / len(self._samples)

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        n = signals.desired
        score = self.score(signals)
        ready_fraction = len(signals.ready) / n if n else 1.0
        if n == 0:  # KEDA's activation: any held request wakes the fleet
            raw = 1 if signals.held_requests else 0
        else:
            raw = llmd_desired(n, score, ready_fraction)
        replicas = _clamp(self._behavior.apply(signals.time, n, raw), self.config)
        rule = "ScaleUp" if replicas > n else "ScaleDown" if replicas < n else _hold_rule(score, raw, n)
        values = {"score": score, "ready_fraction": ready_fraction, "raw": float(raw)}
        message = f"{self.name}: score {score:.2f} (up > 0.55, down < 0.40) recommends {raw}, applying {replicas}"
        return ScalingDecision(signals.time, replicas, rule, message, values)


def _hold_rule(score: float, raw: int, current: int) -> str:
    if LLMD_DOWN_THRESHOLD <= score <= LLMD_UP_THRESHOLD:
        return "HoldBand"
    return "HoldRateLimit" if raw > current else "HoldStabilization" if raw < current else "HoldBand"


def _waiting(replica: ReplicaSignals) -> float | None:
    return replica.waiting


def _running(replica: ReplicaSignals) -> float | None:
    return replica.running if replica.waiting is not None else None


@dataclass
class LlmdQueue:
    """llm-d's queue-depth KEDA recipe, see the module docstring."""

    config: AutoscalingConfig
    name: str = "llmd-queue"
    period_seconds: float = LLMD_POLL_S
    _behavior: HPABehavior = field(init=False)
    _last_active: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:  # HPA's default behaviour, with the recipe's 300 s window
        self._behavior = HPABehavior(RateLimits(4, 100.0, LLMD_POLL_S, None, LLMD_POLL_S), LLMD_QUEUE_WINDOW_S)

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        now, n = signals.time, signals.desired
        by_queue, _, waiting = hpa_recommend(signals, _waiting, LLMD_QUEUE_WAITING_TARGET)
        by_running, _, running = hpa_recommend(signals, _running, LLMD_QUEUE_RUNNING_TARGET)
        raw = max(by_queue, by_running)
        if self._last_active is None or waiting or running or signals.held_requests:
            self._last_active = now
        if raw == 0 and now - self._last_active < LLMD_QUEUE_WINDOW_S:
            raw = min(n, 1)  # KEDA's cooldown: the last step to zero waits 300 s idle
        if n == 0 and signals.held_requests:
            raw = 1
        replicas = _clamp(self._behavior.apply(now, n, raw), self.config)
        rule = "ScaleUp" if replicas > n else "ScaleDown" if replicas < n else "Hold"
        values = {"waiting": waiting, "running": running, "raw": float(raw)}
        message = (
            f"{self.name}: {waiting:g} waiting / 1 and {running:g} running / 16 per replica recommend {raw}, "
            f"applying {replicas}"
        )
        return ScalingDecision(now, replicas, rule, message, values)


def holt_forecast(rates: list[float], alpha: float = HOLT_ALPHA, beta: float = HOLT_BETA) -> float:
    """Holt's linear exponential smoothing: the next value of ``rates`` from a smoothed level and trend."""
    if not rates:
        raise ValueError("a forecast needs at least one observed interval")
    level, trend = rates[0], 0.0
    for rate in rates[1:]:
        previous = level
        level = alpha * rate + (1 - alpha) * (level + trend)
        trend = beta * (level - previous) + (1 - beta) * trend
    return max(0.0, level + trend)


@dataclass
class DynamoPlanner:
    """Dynamo's planner (throughput floor + load steps), see the module docstring; ``replica_rps`` is what one
    replica serves within the SLO (the planner's profiling run), ``ttft_sla_s`` the TTFT SLA."""

    config: AutoscalingConfig
    replica_rps: float
    ttft_sla_s: float
    itl_sla_s: float = DYNAMO_ITL_SLA_S
    name: str = "dynamo"
    period_seconds: float = DYNAMO_STEP_S
    _rates: list[float] = field(default_factory=list, init=False)
    _interval_start: float | None = field(default=None, init=False)
    _interval_samples: list[float] = field(default_factory=list, init=False)
    _floor: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.replica_rps <= 0 or self.ttft_sla_s <= 0 or self.itl_sla_s <= 0:
            raise ValueError("replica_rps, ttft_sla_s and itl_sla_s must be > 0")

    def _update_floor(self, signals: FleetSignals) -> float | None:
        """At each 180 s boundary, the floor for the next interval from the forecast rate (None between)."""
        now = signals.time
        if self._interval_start is None:
            self._interval_start = now
        if signals.arrival_rate is not None:
            self._interval_samples.append(signals.arrival_rate)
        if now - self._interval_start < DYNAMO_INTERVAL_S or not self._interval_samples:
            return None
        self._rates.append(sum(self._interval_samples) / len(self._interval_samples))
        self._interval_start, self._interval_samples = now, []
        forecast = holt_forecast(self._rates)
        self._floor = math.ceil(forecast / self.replica_rps)
        return forecast

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        n = signals.desired
        forecast = self._update_floor(signals)
        ttft, itl = signals.ttft_p90_seconds, signals.tpot_p90_seconds
        over = (ttft is not None and ttft > self.ttft_sla_s) or (itl is not None and itl > self.itl_sla_s)
        under = (ttft or 0.0) < DYNAMO_DOWN_FRACTION * self.ttft_sla_s and (
            itl or 0.0
        ) < DYNAMO_DOWN_FRACTION * self.itl_sla_s
        step, rule = 0, "Hold"
        if signals.starting or len(signals.replicas) < n:
            rule = "HoldScaling"
        elif over or (n == 0 and signals.held_requests):
            step, rule = 1, "ScaleUpLoad"
        elif under:
            step, rule = -1, "ScaleDownLoad"
        wanted = n + step
        if wanted < self._floor:
            wanted, rule = self._floor, "Floor"
        replicas = _clamp(wanted, self.config)
        values = {"ttft_p90": ttft, "itl_p90": itl, "floor": float(self._floor), "forecast_rps": forecast}
        message = f"{self.name}: TTFT P90 {ttft}, ITL P90 {itl} against the SLA, floor {self._floor}: {replicas}"
        return ScalingDecision(signals.time, replicas, rule, message, values)


@dataclass
class AIBrixKPA(KPAStyle):
    """AIBrix's KPA: Knative's law with a projected floor, ``max(reactive, projected)`` (module docstring)."""

    name: str = "aibrix"
    horizon_s: float = AIBRIX_HORIZON_S
    _history: deque[tuple[float, float]] = field(default_factory=deque, init=False)

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        reactive = super().decide(signals)  # records this tick's concurrency as its last sample
        now = signals.time
        self._history.append(self._samples[-1])
        while self._history[0][0] <= now - self.horizon_s:
            self._history.popleft()
        projected_concurrency = max(0.0, trend_projection(list(self._history), now + self.horizon_s))
        per_pod = float(reactive.values["target"] or 1.0)
        projected = _clamp(math.ceil(projected_concurrency / per_pod), self.config)
        values = {**reactive.values, "projected_concurrency": projected_concurrency, "projected": float(projected)}
        if projected > reactive.replicas:
            message = f"{self.name}: trend projects {projected_concurrency:.1f} in {self.horizon_s:g} s: {projected}"
            return ScalingDecision(now, projected, "Projected", message, values)
        return ScalingDecision(now, reactive.replicas, reactive.rule, reactive.message, values)
