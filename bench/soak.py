"""Soak: bounded mixed streaming load through ``shoal gateway`` to several ``shoal serve`` engines.

Clients (``--concurrency``) send a mix for ``--minutes``: completions and chats, streaming and not, short and
long outputs, a share of shared-prefix prompts, and a share of requests abandoned mid-stream (the only errors
injected). Every ``--sample-s`` the resident memory (RSS) of every process is sampled. Reported: requests by
outcome, any error that was not injected, and per process the RSS after warm-up (the first ``--warmup-minutes``)
and at the end, with the least-squares slope over the post-warm-up samples in MiB per minute. Pass: zero
errors beyond the injected ones, and no process growing by more than ``--max-growth-mib`` after warm-up.

    .venv/bin/python bench/soak.py --minutes 10 --engines 3 --concurrency 12
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "tests" / "engine")]

from gateway_fleet import start_engines, start_gateway  # noqa: E402
from tiny_checkpoints import build_checkpoint  # noqa: E402

from shoal.local import LocalProcess  # noqa: E402

SYSTEM = "You are the assistant of the Shoal fleet; answer briefly and precisely. " * 8


def rss_mib(process: LocalProcess) -> float:
    for line in Path(f"/proc/{process.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) samples, in MiB per minute."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    return 60 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / var if var else 0.0


def request_for(rng: random.Random, i: int) -> tuple[str, dict, bool]:
    """(endpoint, body, abandon): a random member of the mix."""
    stream = rng.random() < 0.7
    max_tokens = rng.choice((4, 16, 64))
    shared = rng.random() < 0.5
    text = (SYSTEM if shared else f"request {i}: ") + rng.choice(("Tell me a story.", "What is a shoal?", "Hi"))
    abandon = stream and rng.random() < 0.1
    if rng.random() < 0.5:
        body = {"model": "tiny", "prompt": text, "max_tokens": max_tokens, "stream": stream, "ignore_eos": True}
        return "/v1/completions", body, abandon
    body = {
        "model": "tiny",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        if shared
        else [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    return "/v1/chat/completions", body, abandon


async def load(url: str, seconds: float, concurrency: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    outcomes = {"ok": 0, "abandoned": 0}
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def client(http: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            endpoint, body, abandon = request_for(rng, next(counter))
            try:
                if body["stream"]:
                    async with http.stream("POST", url + endpoint, json=body) as response:
                        if response.status_code != 200:
                            errors.append(f"{response.status_code} {(await response.aread())[:200]!r}")
                            continue
                        async for line in response.aiter_lines():
                            if '"error"' in line:
                                errors.append(line[:200])
                            if abandon:
                                break
                else:
                    response = await http.post(url + endpoint, json=body)
                    if response.status_code != 200:
                        errors.append(f"{response.status_code} {response.text[:200]}")
                        continue
                outcomes["abandoned" if abandon else "ok"] += 1
            except httpx.HTTPError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return {"outcomes": outcomes, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup-minutes", type=float, default=2.0)
    parser.add_argument("--engines", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--max-growth-mib", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_checkpoint(Path(tmp) / "model", "llama", seed=3, max_position_embeddings=2048)
        engines = start_engines(str(model), args.engines, "tiny", Path(tmp), "--num-kv-blocks", "1024")
        gateway = start_gateway([e.url for e in engines], Path(tmp), "--tokenizer", f"tiny={model}")
        processes = {"gateway": gateway, **{f"engine-{i}": e for i, e in enumerate(engines)}}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in processes}
        started = time.monotonic()

        async def run() -> dict[str, object]:
            work = asyncio.create_task(load(gateway.url, args.minutes * 60, args.concurrency, args.seed))
            while not work.done():
                for name, process in processes.items():
                    samples[name].append((time.monotonic() - started, rss_mib(process)))
                await asyncio.wait({work}, timeout=args.sample_s)
            return work.result()

        try:
            result = asyncio.run(run())
        finally:
            for process in processes.values():
                process.stop()
    warm = args.warmup_minutes * 60
    memory = {}
    for name, points in samples.items():
        after = [(t, v) for t, v in points if t >= warm] or points[-1:]
        memory[name] = {
            "rss_after_warmup_mib": round(after[0][1], 1),
            "rss_end_mib": round(after[-1][1], 1),
            "growth_mib": round(after[-1][1] - after[0][1], 1),
            "slope_mib_per_min": round(slope_per_minute(after), 3),
        }
    errors: list[str] = result["errors"]  # type: ignore[assignment]
    passed = not errors and all(m["growth_mib"] <= args.max_growth_mib for m in memory.values())
    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "engines": args.engines,
                "concurrency": args.concurrency,
                "outcomes": result["outcomes"],
                "errors": len(errors),
                "first_errors": errors[:5],
                "memory": memory,
                "passed": passed,
            },
            indent=2,
        )
    )
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
