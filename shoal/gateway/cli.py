"""``shoal gateway``: the routing gateway in front of the engine replicas. Imports nothing heavy until run."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    from shoal.engine_kinds import DEFAULT_KIND, ENGINE_KINDS
    from shoal.gateway.routing import DEFAULT_BOUND_FACTOR, DEFAULT_LOAD_FLOOR_TOKENS, POLICY_NAMES
    from shoal.protocol.block_hash import DEFAULT_BLOCK_SIZE
    from shoal.protocol.gateway_timeouts import (
        DEFAULT_CONNECT_TIMEOUT_S,
        DEFAULT_FIRST_TOKEN_TIMEOUT_S,
        DEFAULT_INTER_TOKEN_TIMEOUT_S,
        DEFAULT_REQUEST_TIMEOUT_S,
    )

    p = subparsers.add_parser(
        "gateway",
        help="Run the OpenAI-compatible routing gateway.",
        description="Auth, quotas, streaming and prefix-aware routing over engine replicas.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    where = p.add_argument_group("backends (one source)")
    where.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="URL",
        help="an engine replica's base URL (repeatable); 'URL kv-events=PORT' for a vLLM publishing its KV events",
    )
    where.add_argument("--backends-file", metavar="PATH", help="a file of replica URLs, one a line; re-read on change")
    where.add_argument(
        "--kube-service", metavar="NAMESPACE/NAME", help="follow the ready endpoints of this Service's EndpointSlices"
    )
    where.add_argument("--kube-port-name", default=None, help="the EndpointSlice port to use (default: the only one)")
    where.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster config)")
    p.add_argument("--policy", choices=POLICY_NAMES, default="prefix-aware")
    p.add_argument(
        "--bound-factor",
        type=float,
        default=DEFAULT_BOUND_FACTOR,
        help="a replica stays eligible while its load is within this factor of the mean",
    )
    p.add_argument(
        "--load-floor-tokens",
        type=int,
        default=DEFAULT_LOAD_FLOOR_TOKENS,
        help="for replicas that announce no capacity, the mean load never counts below this many "
        "tokens when applying the bound (a Shoal engine's floor is its token budget / bound factor)",
    )
    p.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help="the engines' KV block size (tokens); a replica announcing another is shown as a mismatch",
    )
    p.add_argument(
        "--engine-kind",
        choices=ENGINE_KINDS,
        default=DEFAULT_KIND,
        help="the engines' kind: their health path, and how they publish their KV caches (docs/engines.md)",
    )
    p.add_argument(
        "--tokenizer",
        action="append",
        default=[],
        metavar="MODEL=SOURCE",
        help="tokenizer for a served model name (default: the model name itself)",
    )
    p.add_argument(
        "--fetch-record",
        action="append",
        default=[],
        metavar="MODEL=FILE",
        help="a served model's tokenizer is where the record `shoal fetch-model --termination-message-path FILE` "
        "wrote says (the operator's gateway pods)",
    )
    p.add_argument("--api-keys", metavar="PATH", help="YAML/JSON tenants file; without it, no auth")
    p.add_argument("--redis-url", help="share quotas through this Redis (default: in memory)")
    p.add_argument(
        "--quota-store-failure",
        choices=("open", "closed"),
        default="open",
        help="while the Redis quota store is unreachable: admit unmetered (open) or answer 503 (closed)",
    )
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument(
        "--ignore-unknown-fields",
        action="store_true",
        help="accept (and log) request fields OpenAI's API does not define, as vLLM does; they are dropped from "
        "the body forwarded to the engines; default: a 400 naming them",
    )
    p.add_argument("--max-attempts", type=int, default=3, help="replicas tried per request before the first byte")
    p.add_argument(
        "--hold-queue-size",
        type=int,
        default=0,
        help="requests held while a model has no ready replica (scale from zero); 0 answers 503 at once",
    )
    p.add_argument("--hold-seconds", type=float, default=60.0, help="longest a request is held before a 503")
    limits = p.add_argument_group("time limits (seconds; docs/gateway.md)")
    limits.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        help="to open a connection to a replica; past it, another replica is tried",
    )
    limits.add_argument(
        "--first-token-timeout",
        type=float,
        default=DEFAULT_FIRST_TOKEN_TIMEOUT_S,
        help="from sending a streaming request to its first token; past it, another replica or 504",
    )
    limits.add_argument(
        "--inter-token-timeout",
        type=float,
        default=DEFAULT_INTER_TOKEN_TIMEOUT_S,
        help="between two chunks of a stream; past it, the stream ends with an error event",
    )
    limits.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="a whole request; clients may ask for less with the X-Request-Timeout header",
    )
    p.add_argument("--health-interval", type=float, default=2.0, help="seconds between health checks")
    p.add_argument("--no-kv-events", action="store_true", help="do not follow the engines' KV events")
    p.add_argument(
        "--dashboard-data",
        metavar="PATH",
        help="serve /dashboard charting this fleet-figures JSON file (shoal up writes it)",
    )
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=run)


def _tokenizers(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        model, sep, source = pair.partition("=")
        if not sep or not model or not source:
            raise SystemExit(f"--tokenizer expects MODEL=SOURCE, got {pair!r}")
        out[model] = source
    return out


def run(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    import uvicorn

    from shoal.engine_kinds import adapter
    from shoal.gateway.app import create_app
    from shoal.gateway.auth import ApiKeys
    from shoal.gateway.discovery import Discovery, from_file, static
    from shoal.gateway.fetch_record import fetched_tokenizers
    from shoal.gateway.gateway import Gateway, GatewayConfig
    from shoal.gateway.quota import MemoryQuota, QuotaStore

    timeouts = (args.connect_timeout, args.first_token_timeout, args.inter_token_timeout, args.request_timeout)
    if not all(t > 0 for t in timeouts):
        raise SystemExit(
            "--connect-timeout, --first-token-timeout, --inter-token-timeout and --request-timeout must be > 0"
        )
    if args.block_size < 1:
        raise SystemExit("--block-size must be >= 1")
    if args.hold_queue_size < 0 or args.hold_seconds <= 0:
        raise SystemExit("--hold-queue-size must be >= 0 and --hold-seconds > 0")
    sources = [bool(args.backend), bool(args.backends_file), bool(args.kube_service)]
    if sum(sources) != 1:
        raise SystemExit("give exactly one of --backend (repeatable), --backends-file or --kube-service")
    discovery: Discovery
    if args.backend:
        try:
            discovery = static(args.backend)
        except ValueError as exc:
            raise SystemExit(f"--backend: {exc}") from None
    elif args.backends_file:
        discovery = from_file(args.backends_file)
    else:
        from shoal.gateway.kube_discovery import endpoint_slices

        namespace, sep, name = args.kube_service.partition("/")
        if not sep:
            raise SystemExit("--kube-service expects NAMESPACE/NAME")
        discovery = endpoint_slices(namespace, name, args.kube_port_name, args.kubeconfig)
    quota: QuotaStore
    model_quota: QuotaStore
    if args.redis_url:
        from shoal.gateway.quota_redis import MODEL_PREFIX, RedisQuota

        quota = RedisQuota(args.redis_url, fail_open=args.quota_store_failure == "open")
        model_quota = RedisQuota(args.redis_url, prefix=MODEL_PREFIX, fail_open=args.quota_store_failure == "open")
    else:
        quota, model_quota = MemoryQuota(), MemoryQuota()
    config = GatewayConfig(
        policy=args.policy,
        bound_factor=args.bound_factor,
        block_size=args.block_size,
        load_floor_tokens=args.load_floor_tokens,
        tokenizers=_tokenizers(args.tokenizer) | fetched_tokenizers(args.fetch_record),
        max_body_bytes=args.max_body_bytes,
        ignore_unknown_fields=args.ignore_unknown_fields,
        max_attempts=args.max_attempts,
        health_interval_s=args.health_interval,
        kv_events=None if args.no_kv_events else adapter(args.engine_kind).kv_events,
        ready_path=adapter(args.engine_kind).ready_path,
        validate_fields=adapter(args.engine_kind).gateway_validates,
        hold_queue_size=args.hold_queue_size,
        hold_seconds=args.hold_seconds,
        connect_timeout_s=args.connect_timeout,
        first_token_timeout_s=args.first_token_timeout,
        inter_token_timeout_s=args.inter_token_timeout,
        request_timeout_s=args.request_timeout,
    )
    api_keys = ApiKeys.from_file(args.api_keys) if args.api_keys else ApiKeys()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    gateway = Gateway(config, discovery, api_keys, quota, model_quota=model_quota)
    dashboard = Path(args.dashboard_data) if args.dashboard_data else None
    uvicorn.run(
        create_app(gateway, dashboard),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        proxy_headers=False,
        loop="uvloop",
        http="httptools",
    )
    return 0
