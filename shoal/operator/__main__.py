"""``python -m shoal.operator``: the operator's commands alone, without the other areas' parsers."""

from __future__ import annotations

import argparse
import sys

from shoal.operator.cli import register


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m shoal.operator")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
