"""The ``shoal`` command.

Each area registers its own subcommands from a small ``cli`` module that imports nothing heavy at import
time, so ``shoal operator`` or ``shoal gateway`` never pays for (or needs) torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from shoal import __version__

# Modules exposing ``register(subparsers)``; each sets ``func`` on the parsers it adds.
_AREAS: tuple[str, ...] = (
    "shoal.engine.cli",
    "shoal.operator.cli",
    "shoal.gateway.cli",
    "shoal.engine.server.cli",
    "shoal.loadgen.cli",
    "shoal.simulate.cli",
    "shoal.local.cli",
    "shoal.fetch.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoal", description="LLM inference fleets on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"shoal {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _AREAS:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
