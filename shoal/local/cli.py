"""``shoal up``: run an InferenceDeployment manifest on this machine. Imports nothing heavy until it runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "up",
        help="Run an InferenceDeployment manifest locally: gateway, engines, live autoscaling.",
        description="The same manifest kubectl applies, as local processes: a gateway on --port and engine "
        "replicas on free loopback ports, sized by the autoscaler from the engines' own metrics.",
    )
    p.add_argument("file", type=Path, help="the InferenceDeployment YAML, e.g. examples/smollm2-cpu.yaml")
    p.add_argument("--host", default="127.0.0.1", help="the gateway's address (engines stay on loopback)")
    p.add_argument("--port", type=int, default=8080, help="the gateway's port: the OpenAI base URL")
    p.add_argument(
        "--no-tui",
        dest="tui",
        action="store_false",
        help="log lines instead of the live view (the default when stdout is not a terminal)",
    )
    p.add_argument("--log-dir", type=Path, default=None, help="where process logs go (default: a new temp dir)")
    p.add_argument("--api-keys", type=Path, default=None, help="tenants file for the gateway (turns auth on)")
    p.add_argument(
        "--stop-grace",
        type=float,
        default=30.0,
        help="seconds in-flight requests may finish on Ctrl-C before processes are killed",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="send a scripted burst once the fleet is up, show the scale-up and answers, then stop",
    )
    p.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    from shoal.local.main import main

    return main(args)
