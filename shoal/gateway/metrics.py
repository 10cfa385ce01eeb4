"""The gateway's Prometheus metrics, in a registry of its own (one per gateway, so tests can run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "shoal_gateway_requests",
            "Requests answered, by model, tenant and HTTP status.",
            ["model", "tenant", "status"],
            registry=r,
        )
        self.in_flight = Gauge(
            "shoal_gateway_backend_in_flight_requests", "Requests in flight per backend.", ["backend"], registry=r
        )
        self.in_flight_tokens = Gauge(
            "shoal_gateway_backend_in_flight_tokens",
            "Routing load per backend in tokens: uncached prompt tokens still to "
            "prefill (plus output budgets where a backend announces no capacity).",
            ["backend"],
            registry=r,
        )
        self.backend_up = Gauge(
            "shoal_gateway_backend_up", "1 while a backend is healthy and in rotation.", ["backend"], registry=r
        )
        self.kv_synced = Gauge(
            "shoal_gateway_backend_kv_events_synced",
            "1 while the backend's KV events (/kv/events, or vLLM's ZMQ publisher) are followed in sync.",
            ["backend"],
            registry=r,
        )
        self.block_size_mismatch = Gauge(
            "shoal_gateway_backend_block_size_mismatch",
            "The KV block size a backend announces when it is not the one the gateway expects (--block-size); 0 "
            "when they agree.",
            ["backend"],
            registry=r,
        )
        self.decisions = Counter(
            "shoal_gateway_routing_decisions",
            "Routing decisions by policy and reason.",
            ["model", "policy", "reason"],
            registry=r,
        )
        self.matched_blocks = Counter(
            "shoal_gateway_routing_matched_blocks",
            "Prompt blocks the chosen backend was believed to hold.",
            ["model"],
            registry=r,
        )
        self.quota_rejections = Counter(
            "shoal_gateway_quota_rejections", "Requests refused by a tenant quota.", ["tenant", "limit"], registry=r
        )
        self.model_quota_rejections = Counter(
            "shoal_gateway_model_quota_rejections",
            "Requests refused by a model's quota (a LoRA adapter's or a base model's), whichever tenant sent them.",
            ["model", "limit"],
            registry=r,
        )
        self.quota_store_errors = Counter(
            "shoal_gateway_quota_store_errors",
            "Requests met by an unreachable quota store, by what they got "
            "(admitted unmetered: fail open; refused: fail closed).",
            ["outcome"],
            registry=r,
        )
        self.retries = Counter(
            "shoal_gateway_upstream_retries", "Attempts retried on another backend, by cause.", ["cause"], registry=r
        )
        self.timeouts = Counter(
            "shoal_gateway_upstream_timeouts",
            "Upstream exchanges closed because a time limit ran out, by limit.",
            ["limit"],
            registry=r,
        )
        self.duration = Histogram(
            "shoal_gateway_request_duration_seconds",
            "End-to-end time in the gateway.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfb = Histogram(
            "shoal_gateway_time_to_first_byte_seconds",
            "From request arrival to the first upstream byte.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.held = Gauge(
            "shoal_gateway_requests_held",
            "Requests held because no replica of their model is ready (scale-from-zero demand).",
            ["model"],
            registry=r,
        )
        self.overhead = Histogram(
            "shoal_gateway_overhead_seconds",
            "Gateway work before the request is sent upstream (auth to connect).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
