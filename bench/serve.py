"""Engine server benchmark: ``shoal bench serve`` against ``shoal serve`` at concurrency 1, 16 and 64.

Starts one ``shoal serve`` (SmolLM2 by default) on a free loopback port, runs the load generator once per
concurrency level with the same random dataset shape, and prints a Markdown table for docs/benchmarks.md.
Throughput is also given as a ratio to the concurrency-1 run of the same invocation (the baseline), and
the concurrency-1 and -64 runs are compared with the offline ``LLM`` running the same prompts with the same
batch cap after the server has stopped: the ratio is what the HTTP layer, streaming and the step thread cost.

    .venv/bin/python bench/serve.py [--model smollm2-135m] [--out-dir /tmp/shoal-bench-serve]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from shoal.local import LocalProcess, shoal_command

LEVELS = ((1, 4), (16, 32), (64, 64))  # (concurrency, requests)


def offline_throughput(model: str, input_len: int, output_len: int, requests: int, max_num_seqs: int) -> float:
    """Output tokens/s of the offline engine on the bench's own random prompts (same seed, same shape)."""
    from shoal.bench.datasets import random_dataset
    from shoal.engine.core.sampling_params import SamplingParams
    from shoal.engine.llm import LLM

    prompts = [r.prompt for r in random_dataset(requests + 2, input_len, output_len, seed=0)[2:]]
    llm = LLM(model, max_num_seqs=max_num_seqs)
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    llm.generate(prompts[:2], params)  # warm-up, as the server runs get
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    return sum(len(o.token_ids) for o in outputs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--input-len", type=int, default=96)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/shoal-bench-serve"))
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    server = LocalProcess(shoal_command("serve", "--model", args.model), args.out_dir / "serve.log")
    url = server.url
    try:
        server.wait_ready(timeout=600)
        rows = []
        for concurrency, requests in LEVELS:
            out = args.out_dir / f"c{concurrency}.json"
            subprocess.run(
                [
                    *shoal_command("bench", "serve"), "--url", url, "--model", args.model,
                    "--dataset", "random", "--num-requests", str(requests), "--concurrency", str(concurrency),
                    "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--warmup", "2",
                    "--no-progress", "--json", str(out),
                ],
                check=True,
            )
            rows.append((concurrency, requests, json.loads(out.read_text())["summary"]))
    finally:
        server.terminate()
        server.process.wait(timeout=60)
    offline = {
        concurrency: offline_throughput(args.model, args.input_len, args.output_len, requests, concurrency)
        for concurrency, requests, _ in (rows[0], rows[-1])
    }
    base = rows[0][2]["output_throughput_tok_s"]
    print("| concurrency | requests | output tok/s | vs c=1 | req/s | TTFT p50 / p95 / p99 (ms) | ITL p50 / p95 / p99 (ms) | TPOT p50 (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for concurrency, requests, s in rows:
        ttft, itl, tpot = s["ttft"], s["itl"], s["tpot"]
        print(
            f"| {concurrency} | {requests} | {s['output_throughput_tok_s']:.1f} | "
            f"{s['output_throughput_tok_s'] / base:.2f}x | {s['request_throughput_rps']:.2f} | "
            f"{ttft['p50_ms']:.0f} / {ttft['p95_ms']:.0f} / {ttft['p99_ms']:.0f} | "
            f"{itl['p50_ms']:.0f} / {itl['p95_ms']:.0f} / {itl['p99_ms']:.0f} | {tpot['p50_ms']:.0f} |"
        )
    print()
    for concurrency, requests, s in rows:
        if concurrency in offline:
            served = s["output_throughput_tok_s"]
            print(
                f"offline LLM, same {requests} prompts, max_num_seqs={concurrency}: {offline[concurrency]:.1f} "
                f"output tok/s; server at c={concurrency}: {served:.1f} ({served / offline[concurrency]:.2f}x)"
            )


if __name__ == "__main__":
    main()
