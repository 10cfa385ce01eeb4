"""The operator's own Prometheus metrics (``docs/metrics.md``), in a registry of its own (one per operator run, so
tests can run several), served on ``--metrics-port`` at ``/metrics``.

What an operator's user asks of it: are its passes succeeding (``shoal_operator_reconciles_total`` by trigger
and result, and how long they take), what did the autoscaler decide for each fleet and by which rule
(``shoal_operator_autoscaler_decisions_total``, ``shoal_operator_desired_replicas``), which rule holds or moves
its count right now (``shoal_operator_autoscaler_rule``, one series per fleet), and how fast does it
answer Alertmanager (``shoal_operator_alert_webhook_duration_seconds``). The per-fleet series carry
``namespace`` and ``infd``, the labels the alerts use; the chart's ServiceMonitor keeps them
(``honorLabels``), as kube-state-metrics' does.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
OK, ERROR = "ok", "error"  # a pass's result, when it is neither a Degraded reason


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "shoal_operator_reconciles",
            "Reconcile passes, by trigger (change, resume, refresh, alert) and result: ok, error (the pass raised "
            "and is retried) or the reason of the Degraded condition it found.",
            ["trigger", "result"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "shoal_operator_reconcile_duration_seconds",
            "Time one reconcile pass took, by trigger.",
            ["trigger"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "shoal_operator_autoscaler_decisions",
            "Autoscaler evaluations of a fleet, by the policy rule that decided.",
            ["namespace", "infd", "rule"],
            registry=r,
        )
        self.desired_replicas = Gauge(
            "shoal_operator_desired_replicas",
            "The engine count the operator last decided for a fleet (the spec's, or the autoscaler's).",
            ["namespace", "infd"],
            registry=r,
        )
        self.active_rule = Gauge(
            "shoal_operator_autoscaler_rule",
            "1 for the policy rule of a fleet's latest autoscaler evaluation, a hold included (one series per fleet: "
            "the previous rule's is removed).",
            ["namespace", "infd", "rule"],
            registry=r,
        )
        self.alert_webhook = Histogram(
            "shoal_operator_alert_webhook_duration_seconds",
            "Alertmanager webhook requests, from receipt to answer (scale writes included), by HTTP status.",
            ["code"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )

        self._rules: dict[tuple[str, str], set[str]] = {}  # the decision series of each fleet, for forget
        self._active: dict[tuple[str, str], str] = {}  # the rule series each fleet shows now

    def decided(self, namespace: str, name: str, replicas: int, rule: str | None) -> None:
        """One pass's engine count for a fleet, and the autoscaler's rule when it decided."""
        self.desired_replicas.labels(namespace, name).set(replicas)
        before = self._active.pop((namespace, name), None)
        if before is not None and before != rule:  # one series per fleet; none once autoscaling is off
            self.active_rule.remove(namespace, name, before)
        if rule is not None:
            self.decisions.labels(namespace, name, rule).inc()
            self._rules.setdefault((namespace, name), set()).add(rule)
            self.active_rule.labels(namespace, name, rule).set(1)
            self._active[(namespace, name)] = rule

    def forget(self, namespace: str, name: str) -> None:
        """A deleted fleet leaves no series behind."""
        self.desired_replicas.remove(namespace, name)
        for rule in self._rules.pop((namespace, name), ()):
            self.decisions.remove(namespace, name, rule)
        active = self._active.pop((namespace, name), None)
        if active is not None:
            self.active_rule.remove(namespace, name, active)


async def serve_metrics(metrics: OperatorMetrics, host: str, port: int) -> web.AppRunner:
    """Starts ``GET /metrics``; the caller cleans the runner up on shutdown."""

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
