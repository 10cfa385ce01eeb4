"""Prometheus metrics of one engine server, in a registry of its own (docs/metrics.md lists them all).

Two sources feed it. The step thread reports each step's outputs: latencies go into histograms the moment a
request reaches a milestone (first token, each further token, finish). Engine-wide state (queue depth, KV
usage, cumulative token and prefix-cache counters) is a snapshot the step thread stores after every step;
a custom collector turns the latest snapshot into gauges and counters at scrape time, so a scrape never
touches the single-threaded engine. Every series carries the ``model`` label; the autoscaler reads
``shoal_engine_requests_waiting`` and the TTFT histogram's P95, and ``shoal_engine_requests_running`` against
``shoal_engine_max_num_seqs`` (the batch limit, constant for the process) to see a replica near saturation before
its queue grows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shoal.engine.core.outputs import EngineStats, RequestOutput
from shoal.engine.server.startup_metrics import StartupCollector

PREFIX = "shoal_engine"
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
SLOW_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
TTFT_BUCKETS = (*FAST_BUCKETS, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class _StatsCollector(Collector):
    """Exposes the latest ``EngineStats`` snapshot."""

    def __init__(self, model: str) -> None:
        self._model = model
        self.max_num_seqs: int | None = None
        self.max_loras: int | None = None  # set with LoRA enabled
        self.stats: EngineStats | None = None

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        if stats is None:
            return
        gauges: tuple[tuple[str, str, float], ...] = (
            ("requests_running", "Requests in the running batch.", stats.num_running),
            ("requests_waiting", "Requests waiting to be scheduled (queue depth).", stats.num_waiting),
            ("kv_cache_usage_ratio", "Fraction of KV cache blocks in use by requests (0..1).", stats.kv_usage),
            ("kv_cache_free_blocks", "KV cache blocks not held by any request.", stats.num_free_blocks),
            ("kv_cache_total_blocks", "KV cache blocks in the pool.", stats.num_total_blocks),
        )
        if self.max_num_seqs is not None:
            limit = ("max_num_seqs", "Requests the running batch holds at most (--max-num-seqs).", self.max_num_seqs)
            gauges = (*gauges, limit)
        for name, doc, value in gauges:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
            family.add_metric([self._model], value)
            yield family
        counters = (
            (
                "prefix_cache_queries_tokens",
                "Prompt tokens looked up in the prefix cache.",
                stats.prefix_queried_tokens,
            ),
            ("prefix_cache_hits_tokens", "Prompt tokens found in the prefix cache.", stats.prefix_hit_tokens),
            ("preemptions", "Requests preempted (KV blocks reclaimed, recomputed later).", stats.num_preemptions),
            ("prompt_tokens", "Prompt tokens computed (prefilled).", stats.prompt_tokens),
            ("generation_tokens", "Tokens generated.", stats.generation_tokens),
        )
        for name, doc, value in counters:
            counter = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
            counter.add_metric([self._model], value)
            yield counter
        yield from self._lora(stats)

    def _lora(self, stats: EngineStats) -> Iterator[Metric]:
        """Per adapter (vLLM's ``vllm:lora_requests_info`` as one series per adapter), only with LoRA enabled."""
        if self.max_loras is None:
            return
        limit = GaugeMetricFamily(
            f"{PREFIX}_max_loras", "Adapters one batch holds at most (--max-loras).", labels=["model"]
        )
        limit.add_metric([self._model], self.max_loras)
        yield limit
        for name, doc, counts in (
            ("lora_requests_running", "Running requests, by LoRA adapter.", stats.lora_running),
            ("lora_requests_waiting", "Waiting requests, by LoRA adapter.", stats.lora_waiting),
        ):
            family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["model", "adapter"])
            for adapter, count in sorted(counts.items()):
                family.add_metric([self._model, adapter], count)
            yield family
        evictions = CounterMetricFamily(
            f"{PREFIX}_lora_evictions", "LoRA adapters evicted from their slot for another.", labels=["model"]
        )
        evictions.add_metric([self._model], stats.lora_evictions)
        yield evictions


class ServerMetrics:
    """The server's metrics; ``observe_step`` is called from the step thread only."""

    def __init__(self, model: str) -> None:
        disable_created_metrics()  # ``_created`` series only add noise to every scrape
        self.model = model
        self.registry = CollectorRegistry()
        self._stats = _StatsCollector(model)
        self.registry.register(self._stats)
        self.startup = StartupCollector(model)
        self.registry.register(self.startup)
        reg = self.registry

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(f"{PREFIX}_{name}", doc, ["model"], registry=reg, buckets=tuple(buckets)).labels(model)

        self.ttft = histogram("time_to_first_token_seconds", "Arrival to first generated token.", TTFT_BUCKETS)
        self.itl = histogram(
            "inter_token_latency_seconds", "Time between consecutive tokens of a request.", FAST_BUCKETS
        )
        self.e2e = histogram("e2e_request_latency_seconds", "Arrival to finish.", SLOW_BUCKETS)
        self.queue = histogram("queue_time_seconds", "Arrival to first scheduled.", SLOW_BUCKETS)
        self.prefill = histogram("prefill_time_seconds", "First scheduled to first token.", TTFT_BUCKETS)
        self.decode = histogram("decode_time_seconds", "First token to last token.", SLOW_BUCKETS)
        self._finished = Counter(
            f"{PREFIX}_requests_finished", "Requests finished, by finish reason.", ["model", "reason"], registry=reg
        )
        self._aborted = Counter(
            f"{PREFIX}_requests_aborted",
            "Requests aborted before their natural end: client gone, time limit, shutdown.",
            ["model"],
            registry=reg,
        ).labels(model)
        self._rejected = Counter(
            f"{PREFIX}_requests_rejected",
            "Requests refused at admission, by reason (queue_full, draining, invalid).",
            ["model", "reason"],
            registry=reg,
        )
        self._last_token: dict[str, float] = {}
        self._lora: _LoRAMetrics | None = None

    def loaded(self, max_num_seqs: int, max_loras: int | None = None) -> None:
        """The loaded engine's batch limit, exported from now on next to its running count (and its adapter slots,
        with LoRA)."""
        self._stats.max_num_seqs = max_num_seqs
        self._stats.max_loras = max_loras
        if max_loras is not None:
            self._lora = _LoRAMetrics(self.model, self.registry)

    def observe_step(self, outputs: list[RequestOutput], stats: EngineStats) -> None:
        """Records one engine step: latency milestones per request, then the engine snapshot."""
        for out in outputs:
            m = out.metrics
            if self._lora is not None and out.lora_name is not None:
                self._lora.observe(out, first=out.request_id not in self._last_token)
            if out.new_token_ids and m.last_token_time is not None:
                previous = self._last_token.get(out.request_id)
                if previous is None:
                    if m.ttft is not None:
                        self.ttft.observe(m.ttft)
                    self.startup.first_token(time.time())
                else:
                    gap = (m.last_token_time - previous) / len(out.new_token_ids)
                    for _ in out.new_token_ids:
                        self.itl.observe(gap)
                self._last_token[out.request_id] = m.last_token_time
            if out.finished:
                self._last_token.pop(out.request_id, None)
                self._observe_finished(out)
        self._stats.stats = stats

    def _observe_finished(self, out: RequestOutput) -> None:
        m = out.metrics
        self._finished.labels(self.model, out.finish_reason or "unknown").inc()
        if out.finish_reason == "abort":
            self._aborted.inc()
        for histogram, value in (
            (self.e2e, m.e2e_time),
            (self.queue, m.queue_time),
            (self.prefill, m.prefill_time),
            (self.decode, m.decode_time),
        ):
            if value is not None:
                histogram.observe(value)

    def observe_rejected(self, reason: str) -> None:
        self._rejected.labels(self.model, reason).inc()


class _LoRAMetrics:
    """Per adapter: finished requests, generated tokens, TTFT (registered only on an engine with LoRA enabled)."""

    def __init__(self, model: str, registry: CollectorRegistry) -> None:
        self._model = model
        labels = ["model", "adapter"]
        self.finished = Counter(
            f"{PREFIX}_lora_requests_finished", "Requests finished, by LoRA adapter.", labels, registry=registry
        )
        self.tokens = Counter(
            f"{PREFIX}_lora_generation_tokens", "Tokens generated, by LoRA adapter.", labels, registry=registry
        )
        self.ttft = Histogram(
            f"{PREFIX}_lora_time_to_first_token_seconds",
            "Arrival to first generated token, by LoRA adapter.",
            labels,
            registry=registry,
            buckets=TTFT_BUCKETS,
        )

    def observe(self, out: RequestOutput, first: bool) -> None:
        adapter = out.lora_name
        if out.new_token_ids:
            self.tokens.labels(self._model, adapter).inc(len(out.new_token_ids))
            if first and out.metrics.ttft is not None:
                self.ttft.labels(self._model, adapter).observe(out.metrics.ttft)
        if out.finished:
            self.finished.labels(self._model, adapter).inc()
