"""``shoal operator`` (run the operator) and ``shoal crd`` (print or write the generated CRD).

Nothing heavy is imported until a command runs; neither command ever imports torch.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import sys
from pathlib import Path

# A Kubernetes label: an optional DNS-subdomain prefix and a name of at most 63 characters; a value likewise
LABEL_KEY = r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"


def register(subparsers: argparse._SubParsersAction) -> None:
    op = subparsers.add_parser("operator", help="Run the Kubernetes operator (in a cluster or with a kubeconfig).")
    op.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster ServiceAccount, then $KUBECONFIG).")
    op.add_argument("-n", "--namespace", action="append", default=[], help="Watch only these namespaces (repeatable).")
    op.add_argument("--peering", default="shoal", help="kopf peering object shared by HA replicas (default: shoal).")
    op.add_argument("--standalone", action="store_true", help="No peering: for a single replica, or development.")
    op.add_argument(
        "--priority",
        type=int,
        default=None,
        help="Peering priority; the live replica with the highest acts, the others wait (default: random).",
    )
    op.add_argument("--resync-seconds", type=float, default=10.0, help="Status refresh interval (default: 10).")
    op.add_argument(
        "--discovery-seconds",
        type=float,
        default=60.0,
        help="How often to look for the Prometheus Operator's CRDs (default: 60).",
    )
    scaling = op.add_argument_group("autoscaler (InferenceDeployments with autoscaling.enabled)")
    scaling.add_argument(
        "--prometheus-url",
        default=None,
        help="Prometheus for autoscaling.metrics.source: prometheus when the spec names none, e.g. http://prometheus:9090.",
    )
    scaling.add_argument(
        "--metrics-timeout",
        type=float,
        default=5.0,
        help="Longest one observation of a fleet's metrics may take; past it the count is held (default: 5).",
    )
    scaling.add_argument(
        "--alerts-port",
        type=int,
        default=0,
        help="Serve the Alertmanager webhook (POST /alerts) on this port; 0 turns it off (default).",
    )
    scaling.add_argument(
        "--alerts-token-file",
        type=Path,
        default=None,
        help="File holding the webhook's bearer token (a mounted Secret key); required with --alerts-port.",
    )
    op.add_argument(
        "--engine-image",
        action="append",
        default=[],
        metavar="KIND=IMAGE",
        help="The engine image for an engine kind (shoal, vllm, sglang, llamacpp) where spec.engine.image names "
        "none (repeatable; the chart's engineImages).",
    )
    op.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="Serve the operator's own Prometheus metrics (GET /metrics) on this port; 0 turns it off (default).",
    )
    op.add_argument(
        "--monitoring-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A label for every PodMonitor and PrometheusRule the operator creates, e.g. release=kube-prometheus-stack "
        "for a Prometheus that selects them by label (repeatable; the chart's monitoring.labels).",
    )
    op.add_argument(
        "--gateway-image",
        default=None,
        metavar="IMAGE",
        help="The gateway image where spec.gateway.image names none (the chart passes its own image, or its "
        "gatewayImage); default: the release's image, ghcr.io/shoal-dev/shoal at this version.",
    )
    op.add_argument(
        "--manage-crd",
        action="store_true",
        help="At start-up, server-side apply this version's InferenceDeployment CRD when the installed one is older "
        "(its shoal.dev/crd-version annotation); never a newer one (the chart's crds.manage: helm upgrade never "
        "updates crds/).",
    )
    op.add_argument("--liveness", default=None, help="Serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz.")
    op.add_argument("-v", "--verbose", action="store_true")
    op.set_defaults(func=run_operator)

    crd = subparsers.add_parser("crd", help="Print the InferenceDeployment CRD generated from the typed spec.")
    crd.add_argument("--write", action="store_true", help="Write it into crds/ and charts/shoal/ under --root.")
    crd.add_argument("--check", action="store_true", help="Exit 1 when the files under --root are stale.")
    crd.add_argument("--root", type=Path, default=Path.cwd(), help="Repository root (default: current directory).")
    crd.set_defaults(func=run_crd)


def run_operator(args: argparse.Namespace) -> int:
    import kopf

    from shoal.operator.alert_receiver import read_token
    from shoal.operator.handlers import AlertsConfig, OperatorConfig, build_registry
    from shoal.operator.sources import operator_autoscaler

    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose:  # one line per HTTP request or per timer tick would drown what matters
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("kopf.objects").addFilter(quiet_timer_successes)
    if args.alerts_port and args.alerts_token_file is None:
        print("--alerts-port needs --alerts-token-file (the receiver never runs without a token)", file=sys.stderr)
        return 2
    try:
        images = engine_images(args.engine_image)
        labels = monitoring_labels(args.monitoring_label)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    config = OperatorConfig(
        engine_images=images,
        monitoring_labels=labels,
        metrics_port=args.metrics_port,
        gateway_image=args.gateway_image,
        manage_crd=args.manage_crd,
        resync_seconds=args.resync_seconds,
        discovery_seconds=args.discovery_seconds,
        autoscaler=operator_autoscaler(args.prometheus_url, args.metrics_timeout),
        alerts=AlertsConfig(args.alerts_port, read_token(args.alerts_token_file)) if args.alerts_port else None,
    )
    registry = build_registry(config)
    kopf.run(
        registry=registry,
        standalone=args.standalone,
        peering_name=None if args.standalone else args.peering,
        priority=args.priority if args.priority is not None else random.randint(1, 1_000_000),
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )
    return 0


def engine_images(pairs: list[str]) -> dict[str, str]:
    """``--engine-image KIND=IMAGE`` flags as a mapping; a malformed pair or unknown kind is an error naming it."""
    from shoal.engine_kinds import ENGINE_KINDS

    images = {}
    for pair in pairs:
        kind, _, image = pair.partition("=")
        if kind not in ENGINE_KINDS or not image:
            raise ValueError(f"--engine-image {pair!r}: expected KIND=IMAGE with KIND one of {', '.join(ENGINE_KINDS)}")
        images[kind] = image
    return images


def monitoring_labels(pairs: list[str]) -> dict[str, str]:
    """``--monitoring-label KEY=VALUE`` flags as a mapping; a pair that is no valid label is an error naming it."""
    labels = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not re.fullmatch(LABEL_KEY, key) or not re.fullmatch(LABEL_VALUE, value):
            raise ValueError(f"--monitoring-label {pair!r}: expected KEY=VALUE, a valid Kubernetes label")
        labels[key] = value
    return labels


def quiet_timer_successes(record: logging.LogRecord) -> bool:
    """Drops kopf's line per status-refresh tick, never a timer's warning or error: a refresh that keeps failing
    must show in the log."""
    return record.levelno >= logging.WARNING or not record.getMessage().startswith("Timer ")


def run_crd(args: argparse.Namespace) -> int:
    from shoal.operator.generated import stale_files, write_generated

    if args.check:
        stale = stale_files(args.root)
        for path in stale:
            print(f"stale: {path} (run `shoal crd --write`)", file=sys.stderr)
        return 1 if stale else 0
    if args.write:
        for path in write_generated(args.root):
            print(f"wrote {path}")
        return 0
    from shoal.operator.crd import render_crd

    sys.stdout.write(render_crd())
    return 0
