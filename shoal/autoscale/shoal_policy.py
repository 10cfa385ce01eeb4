"""Shoal's autoscaling policy: fast up in proportion to the breach, slow down only when the survivors cope.

The control law, evaluated on every observation (``docs/autoscaling.md`` has the rule table):

1. **Bounds first.** A count outside ``[min, max]`` is brought back at once (``ScaleToMin``/``ScaleToMax``).
2. **Zero.** At zero replicas the fleet scales from zero as soon as the gateway holds requests or a queue shows
   (``ScaleFromZero``), sized to the held requests; otherwise it stays there (``HoldAtZero``).
3. **No data, no move.** A source that could not observe (``signals.missing``) holds the size
   (``HoldMissingMetrics``); a firing alert is then the only evidence and adds one replica (``ScaleUpAlert``).
4. **Up, fast.** Three estimates of the replicas needed, the largest wins: queue depth per ready replica over
   target on every observation of the last 6 s, the panic window (``ScaleUpQueue``: ``ready * queue / target``,
   or with a known capacity the demand plus the backlog worked off over a replica start-up as the fleet has seen
   them (:mod:`shoal.autoscale.startup`, at least a minute), or before that at the rate per replica the fleet
   has served without its queue growing, a lower bound of the capacity), TTFT P95 over target
   while every ready replica has requests waiting (``ScaleUpTTFT``: one more replica, or the demand sizing when
   capacity is known; a latency window still remembering a breach already answered must not multiply the fleet,
   and without queues a slow first token is not a lack of replicas), and the demand over the learned capacity
   (``ScaleUpRate``: ``demand / (capacity * target_utilization)``, see :mod:`shoal.autoscale.capacity`: measured
   when the queue outgrew the fleet, or before that estimated from what replicas serve with their batches near
   full), which moves before latency does. A fourth, the trend (``ScaleUpTrend``, :mod:`shoal.autoscale.trend`):
   the arrival rate's trusted climb projected one replica start-up ahead needs more than the count, so a steady
   climb finds its replicas ready instead of a start-up late (a rise within a start-up smaller than the tolerance
   of one replica is noise the band absorbs); it moves at most ``max_step`` and holds a scale-down while it
   lasts. A count guessed from the queue's proportion or from latency moves at most ``max_step`` per decision;
   a breach sized from measured rates (**panic**, Knative's word) goes to that size in one decision, since a 3x
   step needs twice the fleet added at once. The smallest recommendation over ``scale_up_stabilization_seconds``
   applies (0 by default: the first breached observation acts), except under
   a firing alert, which acts at once.
5. **Capacity on its way.** Replicas still starting (or asked for and not yet created) count as capacity: while
   any is loading, the queue and TTFT rules, which keep rising until the new replicas serve, cannot add more
   (``HoldStarting``); only a higher arrival rate can, since that is a new breach, not the same one. A replica
   starting for longer than ``startup_timeout_seconds`` is presumed stuck: it counts neither as capacity nor as
   loading (a pod that never loads must not block every later scale-up, nor every scale-down, which removes it
   first as a ReplicaSet removes unready pods first), and scale-ups add to it.
6. **Burst memory.** A breach still on while the replicas asked for it load means bursts outrun start-up here;
   for ``burst_memory_seconds`` after it (renewed by each burst as large) the fleet keeps the size the burst's
   arrival rate needs at full capacity (``HoldSteady`` naming the burst), so a recurring burst finds it ready
   instead of waiting minutes for it again; while the burst is back no larger (within the tolerance) and without
   a breach, the rate rule leaves that size be, since it sizes at ``target_utilization``, which the kept size is
   not meant to meet. Once the burst has come back, its interval is known (:mod:`shoal.autoscale.recurrence`):
   between returns the memory sleeps, and the longest start-up seen plus a quarter of the interval before the
   next is due the fleet is raised to the burst's size (``ScaleUpBurstDue``); a return that misses its due time
   by as long ends that. The
   kept size is a floor over the scale-down window's count, not a count in it, so once the memory sleeps or runs
   out the fleet goes to what the window saw the load need.
7. **Down, slowly.** Each observation recommends the replicas the load needs: the minimum when idle, else the
   demand over ``capacity * target_utilization * (1 - tolerance)`` (the tolerance band: steady load never flaps
   around a boundary), else, before capacity is known, one fewer when the consolidation check passes (under one
   request waiting per survivor, each survivor's share of arrivals under the rate per replica at which the fleet
   last breached or a consolidation was followed by a breach, TTFT under half its target, KV usage of the survivors, ``N/(N-1)`` of today's, under 0.8). The largest
   recommendation over ``scale_down_stabilization_seconds`` applies, at most ``max_step`` down; over a minute
   instead while the arrival rate falls as a line (:meth:`ArrivalTrend.falling`, by a trusted slope worth at least
   the tolerance band of one replica over the full window): the window is there to ride out noise around a level,
   and a fall that ten minutes of rates prove is not noise. Scale-down is
   held while an alert fires, while data is partial, while a replica is loading (it would be the one removed),
   and until the policy has a full window of its own history (a restarted autoscaler knows nothing).
8. **Idle to zero.** With ``min: 0``, a fleet with nothing arriving, queued or running for a whole scale-down
   window goes to zero (``ScaleToZero``).
9. **Predictive floor** (``predictive``, off by default). The arrival rate forecast one start-up ahead (the
   seasonal shape learned from this policy's own history plus the trend of what it does not explain,
   :mod:`shoal.autoscale.forecast`) needs ``ceil(forecast / (capacity * target_utilization) - tolerance)``
   replicas; the fleet is raised to that floor ahead of the load (``ScaleUpForecast``, from zero too) and a
   scale-down stops at it (``HoldForecast``). The floor only raises: no count is ever lowered on a forecast, and without a whole
   season of history or a learned capacity there is no floor (the message says which) and the law above is all.

The object keeps only bounded state (window deques, the capacity estimate, the last start-ups), reads time only from
``signals.time`` and does no I/O, so the operator, ``shoal up`` and the simulator run exactly this code.
"""

from __future__ import annotations

import math

from shoal.autoscale.capacity import CapacityEstimate
from shoal.autoscale.config import AutoscalingConfig
from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.forecast import ArrivalForecast
from shoal.autoscale.load import FleetLoad, fleet_load
from shoal.autoscale.recurrence import BurstRecurrence, wake_lead
from shoal.autoscale.signals import FleetSignals
from shoal.autoscale.startup import StartupTimes
from shoal.autoscale.trend import ArrivalTrend, TrendProjection
from shoal.autoscale.window import WindowExtreme

# consolidation check before the capacity is known: survivors' KV usage and TTFT must stay this far from trouble
_CONSOLIDATE_KV_USAGE = 0.8
_CONSOLIDATE_TTFT_SHARE = 0.5
# a queue that piled up is sized to drain over a replica start-up as this fleet's replicas took it (the median
# seen), never under a minute: replicas asked for now arrive only after loading, by when a fleet sized to the
# arrival rate has worked most of the backlog off
_BACKLOG_DRAIN_SECONDS = 60.0
# Knative's panic window: long enough that one noisy observation of the queue does not add replicas, short enough
# to act within seconds of a step
_PANIC_SECONDS = 6.0
# the scale-down window while the arrival rate falls as a line (a trusted trend, :mod:`shoal.autoscale.trend`):
# the full window rides out noise around a level, and on a falling load it keeps each replica that long past
# its need; a minute is one of the trend's bins
_FALLING_DOWN_SECONDS = 60.0


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


class ShoalPolicy:
    """The :class:`~shoal.autoscale.policy.ScalingPolicy` the operator, ``shoal up`` and the simulator run."""

    name = "shoal"

    def __init__(self, config: AutoscalingConfig) -> None:
        self.config = config
        self.capacity = CapacityEstimate()
        self._down = WindowExtreme(config.scale_down_stabilization_seconds, largest=True)
        self._down_falling = WindowExtreme(
            min(_FALLING_DOWN_SECONDS, config.scale_down_stabilization_seconds), largest=True
        )
        self._up = WindowExtreme(config.scale_up_stabilization_seconds, largest=False)
        self._since: float | None = None
        self._panic = WindowExtreme(_PANIC_SECONDS, largest=False)
        self._burst_demand, self._burst_until = 0.0, -math.inf
        self.recurrence = BurstRecurrence()
        self._burst_asleep = False  # the remembered burst is over and next due beyond a start-up: not kept now
        self._consolidated: tuple[float, int, float] | None = None  # (time, survivors, arrival) of the last one
        self._breach_since: float | None = None  # when the current breach (queue or TTFT) began
        self.startups = StartupTimes()
        self.trend = ArrivalTrend()
        self.forecast = ArrivalForecast(config.season_seconds) if config.predictive else None
        self._floor = 0  # the predictive floor of the observation being decided (0: none)
        if config.predictive:
            self.name = "shoal-predictive"

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        now = signals.time
        if self._since is None:
            self._since = now
        load = fleet_load(signals, self.config.startup_timeout_seconds)
        self.startups.observe(signals.replicas)
        self.trend.observe(now, signals.arrival_rate)
        values: dict[str, float | None] = {
            "desired": float(signals.desired),
            "ready": float(load.ready),
            "starting": float(load.starting),
            "stuck": float(load.stuck),
            "waiting": load.waiting,
            "queue_per_ready": load.queue_per_ready,
            "running": load.running,
            "kv_usage": load.kv_usage,
            "occupancy": load.occupancy,
            "ttft_p95_seconds": signals.ttft_p95_seconds,
            "arrival_rate": signals.arrival_rate,
            "held_requests": float(signals.held_requests),
            "capacity_per_replica": self.capacity.per_replica,
            "startup_seconds": self.startups.typical,
        }
        self._floor, forecast = self._forecast_floor(signals, values)
        target, rule, message, recommended = self._evaluate(signals, load, values)
        if recommended is not None:
            self._down.add(now, recommended)
            self._down_falling.add(now, recommended)
        if forecast:
            message = f"{message}; {forecast}"
        return ScalingDecision(now, target, rule, message, values)

    def _forecast_floor(self, signals: FleetSignals, values: dict[str, float | None]) -> tuple[int, str]:
        """The replicas the arrival rate forecast one start-up ahead needs at ``capacity * target_utilization``
        (0 without a forecast or a capacity), and what the decision's message says of the forecast ('' when the
        predictive floor is off)."""
        if self.forecast is None:
            return 0, ""
        now, cfg = signals.time, self.config
        self.forecast.observe(now, signals.arrival_rate)
        ahead = max(_BACKLOG_DRAIN_SECONDS, self.startups.typical or 0.0)
        history = self.forecast.history_s(now)
        values["forecast_history_seconds"] = history
        predicted = self.forecast.predict(now, ahead)
        if predicted is None:
            return 0, f"forecast: insufficient history ({history:.0f} s of {cfg.season_seconds:.0f} s), reactive only"
        values["forecast_rps"], values["forecast_ahead_seconds"] = predicted.rate, ahead
        values["forecast_seasonal_rps"], values["forecast_residual_rps"] = predicted.seasonal, predicted.residual
        said = (
            f"forecast: {predicted.rate:.3g} req/s in {ahead:.0f} s (seasonal {predicted.seasonal:.3g}"
            f" {predicted.residual:+.3g} residual)"
        )
        capacity = self.capacity.per_replica
        if capacity is None:
            return 0, f"{said}, capacity not yet known"
        # within the tolerance band of a whole replica the forecast moves nothing (a fading 0.01 req/s is no load)
        floor = max(
            0, min(math.ceil(predicted.rate / (capacity * cfg.target_utilization) - cfg.tolerance), cfg.max_replicas)
        )
        values["forecast_floor"] = float(floor)
        return floor, f"{said} needs {floor}"

    def _evaluate(
        self, signals: FleetSignals, load: FleetLoad, values: dict[str, float | None]
    ) -> tuple[int, str, str, int | None]:
        """(target, rule, message, the count this observation recommends for the scale-down window, None when
        the scale-down path recorded it already)."""
        cfg = self.config
        current = signals.desired
        if current < cfg.min_replicas:
            return (
                cfg.min_replicas,
                "ScaleToMin",
                f"{current} replicas is under min {cfg.min_replicas}",
                cfg.min_replicas,
            )
        if current > cfg.max_replicas:
            return (
                cfg.max_replicas,
                "ScaleToMax",
                f"{current} replicas is over max {cfg.max_replicas}",
                cfg.max_replicas,
            )
        if current == 0:
            target, rule, message = self._from_zero(signals, load)
            if target < self._floor:
                target, rule, message = self._floor, "ScaleUpForecast", f"at zero, the forecast needs {self._floor}"
            return target, rule, message, target
        if signals.missing is not None:
            if signals.alert_firing and not self._loading(signals, load):
                target = min(current + 1, cfg.max_replicas)
                return (
                    target,
                    "ScaleUpAlert",
                    f"alert firing and metrics missing ({signals.missing}): {current} -> {target}",
                    target,
                )
            return current, "HoldMissingMetrics", f"holding {current}: {signals.missing}", current
        if load.ready == 0:
            message = (
                f"holding {current}: no replica ready yet ({load.starting} starting, {load.stuck} past the"
                " start-up timeout)"
            )
            return current, "HoldStarting", message, current
        return self._with_data(signals, load, values)

    def _from_zero(self, signals: FleetSignals, load: FleetLoad) -> tuple[int, str, str]:
        cfg = self.config
        demand = signals.held_requests + load.waiting
        if demand <= 0 or cfg.max_replicas == 0:
            return 0, "HoldAtZero", "at zero: no request held by the gateway or waiting"
        target = min(max(1, math.ceil(demand / cfg.queue_depth_per_replica)), cfg.max_step, cfg.max_replicas)
        message = f"{signals.held_requests} held, {demand:.3g} waiting in all at zero replicas: 0 -> {target}"
        return target, "ScaleFromZero", message

    def _loading(self, signals: FleetSignals, load: FleetLoad) -> bool:
        """Capacity on its way: a replica starting (within the start-up timeout), or more asked for than exist."""
        return load.starting > 0 or signals.desired > load.ready + load.starting + load.stuck

    def _with_data(
        self, signals: FleetSignals, load: FleetLoad, values: dict[str, float | None]
    ) -> tuple[int, str, str, int | None]:
        cfg = self.config
        now, current = signals.time, signals.desired
        ttft, arrival = signals.ttft_p95_seconds, signals.arrival_rate
        queue = load.queue_per_ready
        loading = self._loading(signals, load)
        drain_s = max(_BACKLOG_DRAIN_SECONDS, self.startups.typical or 0.0)
        # a breach counts once it has lasted the panic window (the queue over target on every observation of it),
        # or at once under a firing alert, which is evidence enough
        lasting = self._panic.add(now, queue)
        queue_breach = (queue if signals.alert_firing else lasting) > cfg.queue_depth_per_replica
        ttft_breach = ttft is not None and ttft > cfg.ttft_p95_seconds and load.saturated
        if not (queue_breach or ttft_breach):
            self._breach_since = None
        elif self._breach_since is None:
            self._breach_since = now
        breach_s = 0.0 if self._breach_since is None else now - self._breach_since
        values["breach_seconds"] = breach_s
        if not load.partial and (ttft is not None or not load.busy) and arrival is not None:
            within_slo = queue < 1 and (ttft is None or ttft <= cfg.ttft_p95_seconds)
            self.capacity.observe(now, load.ready, load.waiting, arrival, within_slo, load.saturated, load.occupancy)
        capacity = self.capacity.per_replica
        values["capacity_per_replica"], values["capacity_floor"] = capacity, self.capacity.floor
        sized: float | None = None
        demand = arrival
        if capacity is not None and arrival is not None and not load.partial:
            if queue_breach or ttft_breach:  # the queue's growth shows the arrival rate before a windowed rate does
                demand = self.capacity.demand(load.ready, load.waiting, arrival)
            assert demand is not None
            sized = demand / (capacity * cfg.target_utilization)
            values["demand"], values["sized_replicas"] = demand, sized
        trend, trend_sized = self._trend(now, drain_s, load, values)
        due_in = self._observe_recurrence(now, demand, drain_s, values)

        if (queue_breach or ttft_breach) and arrival is not None:
            self.capacity.breached(load.ready, arrival)
            self._regret_consolidation(now)
        need, rule, why = current, "", ""
        # panic (Knative's word): a breach with measured rates to size by goes to that size in one decision; a 3x
        # step needs twice the fleet added at once, which maxStep, meant for guesses, would take several decisions to
        panic = False
        if (queue_breach or ttft_breach) and not loading:
            rule = "ScaleUpQueue" if queue_breach else "ScaleUpTTFT"
            why = (
                f"queue {queue:.3g} per ready replica > target {cfg.queue_depth_per_replica:.3g}"
                if queue_breach
                else f"TTFT P95 {ttft:.3g}s > target {cfg.ttft_p95_seconds:.3g}s with {load.waiting:.3g} waiting"
            )
            backlog = load.waiting / drain_s
            floor = self.capacity.floor
            if sized is not None and capacity is not None and demand is not None:
                need = math.ceil((demand + backlog) / (capacity * cfg.target_utilization)) + load.stuck
                why += f"; {demand:.3g} req/s plus the backlog over {drain_s:.0f}s at {capacity:.3g} req/s each"
                panic = True
            elif queue_breach and floor is not None and arrival is not None:
                need = math.ceil((arrival + backlog) / floor) + load.stuck
                why += (
                    f"; {arrival:.3g} req/s plus the backlog over {drain_s:.0f}s at the"
                    f" {floor:.3g} req/s each the fleet served without a queue"
                )
                panic = True
            elif queue_breach:
                need = math.ceil(load.ready * queue / cfg.queue_depth_per_replica) + load.stuck
            else:  # latency alone says too little about how many: one more, and look again
                need = current + 1
        usable = current - load.stuck
        remembered = not (queue_breach or ttft_breach) and self._burst_covers(now, demand, usable)
        if (
            sized is not None
            and not remembered
            and sized > usable * (1 + cfg.tolerance)
            and math.ceil(sized) + load.stuck > need
        ):
            need, rule = math.ceil(sized) + load.stuck, "ScaleUpRate"
            why = (
                f"demand {demand:.3g} req/s needs {sized:.3g} replicas at {capacity:.3g} req/s each"
                f" ({self.capacity.basis})"
            )
            panic = queue_breach or ttft_breach
        if (
            trend is not None
            and trend_sized is not None
            and not remembered
            and trend_sized > usable
            and math.ceil(trend_sized) + load.stuck > need
        ):
            need, rule = math.ceil(trend_sized) + load.stuck, "ScaleUpTrend"
            why = (
                f"the arrival rate climbs {trend.slope_floor * 60:.3g} req/s a minute at least, in both halves of"
                f" the last {trend.span_s / 60:.0f} min: {trend.rate:.3g} req/s in {trend.ahead_s:.0f}s, one"
                f" start-up ahead, needs {trend_sized:.3g} replicas at {capacity:.3g} req/s each"
            )
        due = 0 if due_in is None else self._burst_replicas(now, None)
        if due + load.stuck > max(need, usable):
            assert due_in is not None
            need, rule, panic = due + load.stuck, "ScaleUpBurstDue", True
            why = (
                f"the burst of {self._burst_demand:.3g} req/s came back after {values['burst_period_seconds']:.0f}s:"
                f" due in {due_in:.0f}s, within the {values['burst_wake_lead_seconds']:.0f}s it is woken ahead (the"
                f" longest start-up plus a quarter of the interval); it needs {due}"
            )
        if self._floor + load.stuck > max(need, current):
            need, rule, panic = self._floor + load.stuck, "ScaleUpForecast", True
            why = f"the arrival rate forecast one start-up ahead needs {self._floor} at {cfg.target_utilization:.0%}"
        if load.stuck and need > current:
            why += f" (and {load.stuck} stuck starting for over {cfg.startup_timeout_seconds:.0f}s, not counted)"
        up = self._up.add(now, need)
        if need > current:
            if not signals.alert_firing:
                need = max(int(up), current)
            step = cfg.max_replicas if panic else cfg.max_step
            target = min(need, current + step, cfg.max_replicas)
            if target > current:
                if panic and target > current + cfg.max_step:
                    why += f"; panic: past maxStep {cfg.max_step}"
                return target, rule, f"{why} over {load.ready} ready: {current} -> {target}", target
            if current >= cfg.max_replicas:
                message = f"holding {current}: {why}, but {current} is replicas.max; a higher max releases it"
                return current, "HoldAtMax", message, current
            message = (
                f"holding {current}: {why}, not yet for the whole up window; released once it has been wanted"
                f" for {cfg.scale_up_stabilization_seconds:.0f}s"
            )
            return current, "HoldUpStabilization", message, current
        if queue_breach or ttft_breach:
            if loading:
                if arrival is not None and sized is not None:
                    self._remember_burst(now, arrival)
                message = (
                    f"holding {current}: queue {queue:.3g} per ready replica, TTFT P95 {_num(ttft)}s, "
                    f"but {current - load.ready} replicas are on their way; released when they are ready or past "
                    f"the {cfg.startup_timeout_seconds:.0f}s start-up timeout, or by a higher arrival rate"
                )
                return current, "HoldStarting", message, current
            then = (
                "; at replicas.max, so a growing queue finds no more: a higher max releases it"
                if current >= cfg.max_replicas
                else ", or scales up as soon as the queue grows instead"
            )
            message = (
                f"holding {current}: {why}, and {current} replicas drain it within {drain_s:.0f}s; released when"
                f" it drains{then}"
            )
            return current, "HoldDraining", message, current
        if remembered and sized is not None and sized > usable * (1 + cfg.tolerance):
            message = (
                f"holding {current}: demand {demand:.3g} req/s needs {sized:.3g} replicas at"
                f" {cfg.target_utilization:.0%} of {capacity:.3g} req/s each, but it is the remembered burst of"
                f" {self._burst_demand:.3g} req/s, which {usable} serve at full capacity"
            )
            return current, "HoldSteady", message, current
        falling = self._falling()
        if falling is not None:
            values["trend_falling_rps_per_s"] = falling
        return self._down_path(signals, load, sized, demand, loading, trend_sized, falling)

    def _down_path(
        self,
        signals: FleetSignals,
        load: FleetLoad,
        sized: float | None,
        demand: float | None,
        loading: bool,
        trend_sized: float | None,
        falling: float | None,
    ) -> tuple[int, str, str, int | None]:
        cfg = self.config
        now, current = signals.time, signals.desired
        ttft, arrival = signals.ttft_p95_seconds, signals.arrival_rate
        complete = not load.partial and (ttft is not None or not load.busy)
        if not complete:
            return (
                current,
                "HoldMissingMetrics",
                f"holding {current}: {load.ready - load.known} of {load.ready} ready replicas unreported or TTFT unknown",
                current,
            )
        idle = not load.busy and not arrival and signals.held_requests == 0
        if idle:
            need, basis = cfg.min_replicas, "idle: nothing arriving, waiting or running"
        elif sized is not None:
            need = max(1, math.ceil(sized / (1 - cfg.tolerance)), math.ceil(load.waiting / cfg.queue_depth_per_replica))
            basis = f"demand needs {sized:.3g} replicas"
            if ttft is not None and ttft > cfg.ttft_p95_seconds * (1 - cfg.tolerance):
                need, basis = current, f"TTFT P95 {ttft:.3g}s is not {cfg.tolerance:.0%} under target"
        else:
            need, basis = self._consolidate(load, ttft, arrival, current)
        if not idle and trend_sized is not None and math.ceil(trend_sized) > need:
            need, basis = (
                math.ceil(trend_sized),
                f"{basis}, but the rising arrival rate needs {trend_sized:.3g} one start-up ahead",
            )
        forecast = need < min(self._floor, current)
        if forecast:
            need, basis = self._floor, f"{basis}, but the arrival rate forecast one start-up ahead needs {self._floor}"
        need = min(max(need, cfg.min_replicas), current)
        # burst memory is a floor over the stabilized count, not a recommendation in the window: the window
        # learns what the load needed, so a fleet whose memory sleeps or runs out goes to that at once
        burst = 0 if idle else min(self._burst_replicas(now, demand), current)
        schedule = self.recurrence.schedule()
        if self._burst_asleep and schedule is not None:
            basis += (
                f" (the burst of {self._burst_demand:.3g} req/s, back after {schedule.period:.0f}s, is not kept"
                f" until {schedule.due - now:.0f}s from now, when it is due)"
            )
        if burst > need:
            basis += (
                f", but a burst of {self._burst_demand:.3g} req/s that outran start-up needs {burst}"
                f" (kept {self._burst_until - now:.0f}s more)"
            )
        if ttft is not None and ttft > cfg.ttft_p95_seconds and max(need, burst) >= current:
            message = (
                f"holding {current}: TTFT P95 {ttft:.3g}s > target {cfg.ttft_p95_seconds:.3g}s, but"
                f" {load.ready - load.queued_replicas} of {load.ready} ready replicas have no request waiting, so more"
                " replicas would not start requests sooner; released when every ready replica queues (then"
                " ScaleUpTTFT) or TTFT P95 falls under target"
            )
            return current, "HoldNoQueue", message, current
        if max(need, burst) >= current:
            rule = "HoldTolerance" if sized is not None and math.ceil(sized) < current else "HoldSteady"
            rule = "HoldForecast" if forecast else rule
            return current, rule, f"holding {current}: {basis}", need
        if signals.alert_firing:
            return current, "HoldAlert", f"holding {current}: an alert is firing ({basis})", current
        if loading:
            return current, "HoldStarting", f"holding {current}: a replica is still loading ({basis})", current
        window = cfg.scale_down_stabilization_seconds
        assert self._since is not None
        if now - self._since < window:
            message = f"holding {current}: {basis}, but only {now - self._since:.0f}s of history of {window:.0f}s"
            return current, "HoldWarmup", message, need
        stable, short = self._down.add(now, need), self._down_falling.add(now, need)
        if falling is not None:
            stable, window = short, self._down_falling.seconds
            basis += f", the arrival rate falling {-falling * 60:.3g} req/s a minute at least"
        stable = max(stable, burst)
        if stable >= current:
            message = f"holding {current}: {basis}, but {stable:.0f} were needed within the last {window:.0f}s"
            return current, "HoldStabilization", message, None
        target = max(int(stable), current - cfg.max_step, cfg.min_replicas)
        rule = "ScaleToZero" if target == 0 else "ScaleDown"
        if sized is None and not idle and arrival:
            self._consolidated = (now, target, arrival)
        return target, rule, f"{basis}, for the last {window:.0f}s: {current} -> {target}", None

    def _trend(
        self, now: float, ahead_s: float, load: FleetLoad, values: dict[str, float | None]
    ) -> tuple[TrendProjection | None, float | None]:
        """The trusted rising trend one start-up ahead and the replicas it needs at ``target_utilization`` (None,
        None without one, or without a learned capacity to size it by)."""
        capacity = self.capacity.per_replica
        trend = self.trend.project(now, ahead_s)
        if trend is None or capacity is None or load.partial:
            return None, None
        # a rise worth less than the tolerance band of one replica within a start-up is noise the band absorbs
        per_replica = capacity * self.config.target_utilization
        if trend.slope_floor * ahead_s < self.config.tolerance * per_replica:
            return None, None
        sized = trend.rate / per_replica
        values["trend_rps"], values["trend_slope_rps_per_s"], values["trend_sized_replicas"] = (
            trend.rate,
            trend.slope_floor,
            sized,
        )
        return trend, sized

    def _falling(self) -> float | None:
        """The trusted falling slope of the arrival rate (negative), None without one or without a learned capacity.
        As with a climb, a fall worth less than the tolerance band of one replica over the time it would save (the
        scale-down window) is noise the band absorbs: on constant load a line fitted to noise passes the tests
        now and then, and a minute's window there lost a seed of ``heavy-tail`` 5 points."""
        falling, capacity = self.trend.falling(), self.capacity.per_replica
        if falling is None or capacity is None:
            return None
        cfg = self.config
        fall = -falling * cfg.scale_down_stabilization_seconds
        return falling if fall >= cfg.tolerance * capacity * cfg.target_utilization else None

    def _remember_burst(self, now: float, demand: float) -> None:
        """A breach still on while replicas load: the fleet was too small for longer than a start-up takes.
        Keep the size its demand needs for ``burst_memory_seconds``, so the next burst finds it (bursts recur)."""
        if now >= self._burst_until:
            self._burst_demand = 0.0
        if demand > (1 + self.config.tolerance) * self._burst_demand:  # a new burst, or one larger than remembered
            self.recurrence.start(now if self._breach_since is None else self._breach_since)
        self._burst_demand = max(self._burst_demand, demand)
        self._burst_until = now + self.config.burst_memory_seconds

    def _burst_replicas(self, now: float, demand: float | None) -> int:
        """Replicas the remembered burst needs at today's capacity estimate (0 once forgotten); a burst as large
        coming again keeps it remembered."""
        capacity = self.capacity.per_replica
        if now >= self._burst_until or capacity is None or self._burst_asleep:
            return 0
        if demand is not None and demand >= (1 - self.config.tolerance) * self._burst_demand:
            self._burst_until = now + self.config.burst_memory_seconds
        return math.ceil(self._burst_demand / capacity)

    def _burst_covers(self, now: float, demand: float | None, usable: int) -> bool:
        """The remembered burst is back, no larger, and the fleet kept for it is there: the rate rule leaves it be.
        The memory keeps the burst's size at full capacity; a 10 s rate of the same burst reads over it at the
        target utilization about half the time, so without this each recurrence added a replica minutes in."""
        capacity = self.capacity.per_replica
        if now >= self._burst_until or capacity is None or demand is None or self._burst_asleep:
            return False
        within = demand <= (1 + self.config.tolerance) * self._burst_demand
        return within and usable >= math.ceil(self._burst_demand / capacity)

    def _observe_recurrence(
        self, now: float, demand: float | None, drain_s: float, values: dict[str, float | None]
    ) -> float | None:
        """Feeds the remembered burst's recurrence this observation's demand and decides whether the memory sleeps
        now; the seconds until the burst is due when it is over and due within its wake lead
        (its replicas are to be asked for now), else None."""
        self._burst_asleep = False
        if now >= self._burst_until or demand is None:
            return None
        recurrence = self.recurrence
        recurrence.observe(now, demand, self._burst_demand)
        schedule = recurrence.schedule()
        if schedule is None:
            return None
        lead = wake_lead(schedule.period, self.startups.longest or drain_s)
        if recurrence.missed(now, lead):
            recurrence.drop_schedule()
            return None
        values["burst_period_seconds"], values["burst_due_seconds"] = schedule.period, schedule.due - now
        values["burst_wake_lead_seconds"] = lead
        self._burst_asleep = recurrence.asleep(now, lead)
        return schedule.due - now if recurrence.over(now) and not self._burst_asleep else None

    def _regret_consolidation(self, now: float) -> None:
        """A breach within a scale-down window of a consolidation: the survivors could not carry the arrivals they
        were left with, so that rate per replica becomes the ceiling (a breach's own arrival rate is read at a noisy
        peak; without this, constant load flips the fleet between N and N+1 every few minutes)."""
        if self._consolidated is None:
            return
        time, survivors, arrival = self._consolidated
        if now - time <= self.config.scale_down_stabilization_seconds:
            self.capacity.consolidation_failed(survivors, arrival)
        self._consolidated = None

    def _consolidate(self, load: FleetLoad, ttft: float | None, arrival: float | None, current: int) -> tuple[int, str]:
        """Before capacity is known: one fewer if the survivors absorb the leaver's load (N/(N-1)) with room."""
        cfg = self.config
        if load.ready < 2 or current < 2:
            return current, "consolidation needs two ready replicas"
        share = load.ready / (load.ready - 1)
        ceiling = self.capacity.ceiling
        if arrival is not None and arrival / (load.ready - 1) >= ceiling * (1 - cfg.tolerance):
            return current, (
                f"survivors would each get {arrival / (load.ready - 1):.3g} req/s, near the "
                f"{ceiling:.3g} req/s per replica that breached before"
            )
        if load.queue_per_ready * share >= 1:
            return current, f"survivors would have {load.queue_per_ready * share:.2g} requests waiting each"
        if ttft is not None and ttft > cfg.ttft_p95_seconds * _CONSOLIDATE_TTFT_SHARE:
            return current, f"TTFT P95 {ttft:.3g}s over half the target"
        if load.kv_usage is not None and load.kv_usage * share > _CONSOLIDATE_KV_USAGE:
            return current, f"survivors' KV usage would be {load.kv_usage * share:.2f}"
        return current - 1, f"survivors absorb the load ({share:.2f}x each)"
