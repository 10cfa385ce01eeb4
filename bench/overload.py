"""The live overload scenario of issue 33: ``shoal up`` (SmolLM2, replicas 1-3, queue target 2 per replica, TTFT
P95 target 2 s, Shoal's autoscaler on the direct scrape) under a closed loop of ``--clients`` streaming clients
for ``--duration`` seconds, every second of it recorded.

A closed loop's arrival rate follows the service rate, so a rate-sized policy can read a saturated fleet as sized
right; the question this answers is whether every evaluation that saw an SLO breach below ``max`` (its own
values: TTFT P95 over target, fewer than ``max`` replicas) is either a scale-up or a hold that names its rule and
what releases it (``released`` / ``releases`` in the rule's message), as the fleet's view, dashboard and status
show it. Per second: desired / ready / starting, queue, TTFT P95, the
rule in force and its message; at the end the breach seconds below max, how many were explained, the scale
decisions, and the clients' completed and failed requests.

    .venv/bin/python bench/overload.py [--clients 48] [--duration 360] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from chat_load import ChatLoad  # bench/chat_load.py, beside this script

from shoal.cpu_features import cpu_info
from shoal.local import free_port
from shoal.local.manifest import load_manifest
from shoal.local.signals import autoscaling
from shoal.local.up import Up, UpOptions

MODEL = "smollm2"
TTFT_TARGET_S = 2.0
MAX_REPLICAS = 3
PROMPT = "Client {client}, turn {turn}: tell me about the sea."


def _manifest(directory: Path) -> Path:
    document = {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "overload-bench"},
        "spec": {
            "model": {"source": "smollm2-135m", "servedName": MODEL},
            "engine": {"maxModelLen": 1024, "maxNumSeqs": 8, "startupSeconds": 300},
            "replicas": {"min": 1, "max": MAX_REPLICAS},
            "autoscaling": {"enabled": True, "queueDepthPerReplica": 2, "ttftP95Seconds": TTFT_TARGET_S},
        },
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _explained(rule: str, message: str) -> bool:
    """A scale-up is its own explanation; a hold must name what releases it."""
    return rule.startswith("ScaleUp") or "release" in message


async def _scenario(work: Path, clients: int, duration: float, max_tokens: int) -> dict[str, Any]:
    local = load_manifest(_manifest(work))
    policy, source = autoscaling(local.spec)
    up = Up(local, UpOptions(port=free_port(), tui=False, log_dir=work), policy, source, lambda line: None)
    running = asyncio.create_task(up.run(None))
    loop = ChatLoad(up.url, MODEL, clients, max_tokens, PROMPT, timeout_s=300)
    seconds: list[dict[str, Any]] = []
    try:
        while not up.fleet.ready_backends():
            if running.done():
                raise RuntimeError(f"shoal up stopped: {up.failed}")
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)
        loop.start()
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < duration:
            await asyncio.sleep(1.0)
            s = up.snapshot
            if s is None or s.current is None:
                continue
            seconds.append(
                {
                    "t": round(elapsed, 1),
                    "desired": s.desired,
                    "ready": s.count("ready"),
                    "starting": s.count("starting") + s.count("backoff"),
                    "waiting": s.waiting,
                    "ttft_p95": s.ttft_p95_seconds,
                    "rule": s.current.rule,
                    "message": s.current.message,
                    "seen_ttft_p95": s.current.values.get("ttft_p95_seconds"),  # what the evaluation saw
                    "seen_desired": s.current.from_replicas,
                }
            )
        decisions = [
            {"time": round(d.time, 1), "from": d.from_replicas, "to": d.to_replicas, "rule": d.rule}
            for d in (up.snapshot.decisions if up.snapshot else ())
        ]
    finally:
        await asyncio.to_thread(loop.stop)
        up.stopping.set()
        await running
    breach = [s for s in seconds if (s["seen_ttft_p95"] or 0.0) > TTFT_TARGET_S]
    below_max = [s for s in breach if s["seen_desired"] < MAX_REPLICAS]
    unexplained = [s for s in below_max if not _explained(s["rule"], s["message"])]
    ttfts = sorted(loop.ttfts)
    return {
        "clients": clients,
        "duration_s": duration,
        "completed": loop.completed,
        "failed": len(loop.failures),
        "failures": sorted(set(loop.failures))[:10],
        "client_ttft_p50_s": ttfts[len(ttfts) // 2] if ttfts else None,
        "client_ttft_p95_s": ttfts[int(len(ttfts) * 0.95)] if ttfts else None,
        "seconds_recorded": len(seconds),
        "breach_seconds": len(breach),
        "breach_seconds_below_max": len(below_max),
        "unexplained_breach_seconds_below_max": len(unexplained),
        "rules_in_breach_below_max": sorted({s["rule"] for s in below_max}),
        "unexplained_examples": unexplained[:5],
        "decisions": decisions,
        "final_desired": seconds[-1]["desired"] if seconds else None,
        "timeline": seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--duration", type=float, default=360.0, help="seconds of load after the first engine is ready")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the result, timeline included, here")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="shoal-overload-") as work:
        result = asyncio.run(_scenario(Path(work), args.clients, args.duration, args.max_tokens))
    result |= {"commit": commit, "machine": cpu_info().summary(), "load_average": os.getloadavg()[0]}
    summary = {k: v for k, v in result.items() if k != "timeline"}
    print(json.dumps(summary, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if result["unexplained_breach_seconds_below_max"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
