"""``shoal up``'s entry: validate, say what is ignored, check the port, then run the fleet (and the demo)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import yaml
from rich.console import Console

from shoal.fetch import FetchError, default_download_dir, fetch
from shoal.local.manifest import LocalManifest, ManifestError, load_manifest
from shoal.local.up import PortTaken, Up, UpOptions, check_port


def _first_key(path: Path) -> str | None:
    """The first API key in a tenants file, to print with the URL (the gateway itself validates the file)."""
    try:
        tenants = (yaml.safe_load(path.read_text()) or {}).get("tenants") or {}
        return next(str(key) for entry in tenants.values() for key in entry.get("api_keys", []))
    except (OSError, yaml.YAMLError, AttributeError, StopIteration):
        return None


def _up(manifest: LocalManifest, options: UpOptions, console: Console | None) -> Up:
    from shoal.local.signals import autoscaling

    policy, source = autoscaling(manifest.spec)
    say = console.print if console is not None else (lambda line: print(line, flush=True))
    return Up(manifest, options, policy, source, say)


async def _run(up: Up, console: Console | None, demo: bool) -> int:
    if demo:
        from shoal.local.demo import run_demo

        demo_run = asyncio.create_task(run_demo(up, up.say))  # held: the loop keeps only a weak reference
        try:
            return await up.run(console)
        finally:
            demo_run.cancel()  # a no-op once the demo has stopped the fleet, as it does when it ends
    return await up.run(console)


def main(args: argparse.Namespace) -> int:
    try:
        manifest = load_manifest(args.file)
        check_port(args.host, args.port)
    except (ManifestError, PortTaken) as error:
        print(f"shoal up: {error}", file=sys.stderr)
        return 2
    try:  # once, before any engine starts: the engines and the gateway then find it in the cache
        fetch(manifest.spec.model.source, default_download_dir())
    except FetchError as error:
        print(f"shoal up: spec.model.source: {error}", file=sys.stderr)
        return 1
    tui = args.tui and sys.stdout.isatty()
    console = Console() if tui else None
    options = UpOptions(
        host=args.host,
        port=args.port,
        tui=tui,
        log_dir=args.log_dir,
        api_keys=args.api_keys,
        stop_grace_s=args.stop_grace,
    )
    up = _up(manifest, options, console)
    for note in manifest.ignored:
        up.say(f"note: {note}")
    up.say(f"OpenAI base URL: {up.url}/v1    dashboard: {up.url}/dashboard    logs: {up.log_dir}")
    if args.api_keys is not None:
        up.say(f"auth on: API key {_first_key(args.api_keys) or '(none found in the file)'} from {args.api_keys}")
    return asyncio.run(_run(up, console, args.demo))
