"""Engine server benchmark: ``shoal bench serve`` against ``shoal serve`` and llama.cpp's ``llama-server``.

Starts one ``shoal serve`` (SmolLM2 by default, default settings: dtype, quantization and threads chosen for
this CPU) on a free loopback port and runs the load generator once per concurrency level; then, in the same
run, ``llama-server`` on the same GGUF with 64 slots (``-np 64 -c 20480``, built by
``hack/llama-server/build.sh``) under the same load. Every table carries the CPU model and flags, the dtype and
quantization the engine chose (from its start-up log), and each figure as a ratio to llama-server's. The
offline ``LLM`` on the same prompts (``--offline``) shows what HTTP and streaming cost.

    .venv/bin/python bench/serve.py [--model smollm2-135m] [--levels 1:4 64:64] [--serve-arg=--threads=1] [--rounds 2] [--llama-threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from pathlib import Path

from shoal.cpu_features import cpu_info
from shoal.local import LocalProcess, shoal_command
from shoal.model_registry import resolve_model

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "llama-server" / "build.sh"


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


def run_levels(url: str, model: str, levels: list[tuple[int, int]], args: argparse.Namespace, tag: str) -> list:
    rows = []
    for concurrency, requests in levels:
        out = args.out_dir / f"{tag}-c{concurrency}.json"
        subprocess.run(
            [
                *shoal_command("bench", "serve"),
                "--url",
                url,
                "--model",
                model,
                "--dataset",
                "random",
                "--num-requests",
                str(requests),
                "--concurrency",
                str(concurrency),
                "--input-len",
                str(args.input_len),
                "--output-len",
                str(args.output_len),
                "--warmup",
                "2",
                "--no-progress",
                "--json",
                str(out),
            ],
            check=False,  # it exits 1 when a request failed: the row still counts, with its failures shown
        )
        if not out.exists():
            raise SystemExit(f"shoal bench serve wrote no results for {tag} at concurrency {concurrency}")
        rows.append((concurrency, requests, json.loads(out.read_text())["summary"]))
    return rows


def engine_choices(log: str) -> str:
    """The dtype / quantization / kernel / threads lines ``shoal serve`` logged at start-up (the kernel's is a
    warning when it fell back to torch's)."""
    choice = r"(?:INFO|WARNING) \S+ \[[^]]*\] ((?:dtype|quantization|quantized projections|torch threads)\b.*)"
    found = [m.group(1) for m in re.finditer(choice, log)]
    return "; ".join(dict.fromkeys(found)) or "(not logged)"


def run_shoal(args: argparse.Namespace, levels: list[tuple[int, int]], serve_args: list[str], tag: str) -> tuple:
    """Starts ``shoal serve``, runs every level, stops it; returns the rows and its logged choices."""
    server = LocalProcess([*shoal_command("serve", "--model", args.model), *serve_args], args.out_dir / f"{tag}.log")
    try:
        server.wait_ready(timeout=900)
        rows = run_levels(server.url, args.model, levels, args, tag)
        return rows, engine_choices(server.log(200_000))
    finally:
        server.terminate()
        server.process.wait(timeout=60)


def run_llama(args: argparse.Namespace, levels: list[tuple[int, int]], binary: Path, tag: str) -> list:
    """The same levels against ``llama-server`` on the same GGUF with 64 slots."""
    gguf = resolve_model(args.model).path
    threads = str(args.llama_threads)
    # --no-repack: this build's AMX matmul (weights repacked for AMX tiles) segfaults at the first decode on
    # this machine (gdb: ggml_backend_amx_mul_mat); without repacking it runs its AVX-512 Q4_1 kernels.
    llama = LocalProcess(
        [
            str(binary),
            "-m",
            str(gguf),
            "--host",
            "127.0.0.1",
            "-np",
            "64",
            "-c",
            "20480",
            "-t",
            threads,
            "-tb",
            threads,
            "--no-repack",
        ],
        args.out_dir / f"{tag}.log",
    )
    try:
        llama.wait_ready("/health", timeout=600)
        return run_levels(llama.url, args.model, levels, args, tag)
    finally:
        llama.terminate()
        llama.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--levels", nargs="+", default=["1:4", "64:64"], help="concurrency:requests pairs")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra shoal serve argument (repeatable)")
    parser.add_argument("--llama-server", type=Path, default=None, help="binary (default: build.sh's cached one)")
    parser.add_argument("--no-llama-server", action="store_true")
    parser.add_argument(
        "--llama-threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="llama-server's -t/-tb (default: every CPU, as a user would run it)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="alternate the two servers this many times")
    parser.add_argument("--offline", action="store_true", help="also time the offline LLM at the first/last level")
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/shoal-bench-serve"))
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    levels = [(int(c), int(n)) for c, n in (level.split(":", 1) for level in args.levels)]
    serve_args = [a for arg in args.serve_arg for a in arg.split("=", 1)]

    binary = None
    if not args.no_llama_server:
        binary = args.llama_server or Path(
            subprocess.run([str(BUILD_SCRIPT)], check=True, capture_output=True, text=True).stdout.strip()
        )
    results: list[tuple[str, list, list | None]] = []  # name, rows, llama-server's rows of the same round
    choices = "(not logged)"
    for round_ in range(1, args.rounds + 1):
        tag = f"r{round_}" if args.rounds > 1 else ""
        shoal_rows, choices = run_shoal(args, levels, serve_args, f"shoal{tag}")
        llama_rows = run_llama(args, levels, binary, f"llama{tag}") if binary is not None else None
        results.append((f"shoal serve{' ' + tag if tag else ''}", shoal_rows, llama_rows))
        if llama_rows is not None:
            results.append((f"llama-server -t {args.llama_threads}{' ' + tag if tag else ''}", llama_rows, llama_rows))

    print(f"CPU: {cpu_info().summary()}; load average at the end {os.getloadavg()[0]:.1f}")
    print(f"shoal serve {' '.join(serve_args) or '(defaults)'}: {choices}")
    print(f"workload: {args.input_len}-word random prompts, {args.output_len} output tokens (ignore_eos)")
    print()
    print(
        "| server | concurrency | requests (failed) | output tok/s | vs llama-server | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, rows, llama_rows in results:  # each ratio is against llama-server's figure of the same round
        for j, (concurrency, requests, s) in enumerate(rows):
            base = llama_rows[j][2]["output_throughput_tok_s"] if llama_rows else None
            ratio = f"{s['output_throughput_tok_s'] / base:.2f}x" if base else "-"
            print(
                f"| {name} | {concurrency} | {requests} ({s['failed']}) | {s['output_throughput_tok_s']:.1f} | {ratio} | "
                f"{s['ttft']['p50_ms']:.0f} / {s['ttft']['p99_ms']:.0f} | {s['itl']['p50_ms']:.0f} / {s['itl']['p99_ms']:.0f} |"
            )
    if args.offline:
        print()
        shoal_rows = results[0][1]
        for concurrency, requests, s in (shoal_rows[0], shoal_rows[-1]):
            offline = offline_throughput(args.model, args.input_len, args.output_len, requests, concurrency)
            served = s["output_throughput_tok_s"]
            print(
                f"offline LLM, same {requests} prompts, max_num_seqs={concurrency}: {offline:.1f} output tok/s; "
                f"server at c={concurrency}: {served:.1f} ({served / offline:.2f}x)"
            )


if __name__ == "__main__":
    main()
