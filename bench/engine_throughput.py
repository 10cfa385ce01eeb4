"""Offline throughput of Shoal's engine on SmolLM2-135M against Hugging Face transformers, same run.

64 requests of 128-token prompts, 128 output tokens each (ignore_eos, greedy). Baselines: transformers
``generate`` in static batches of 16, and one request at a time (a subset, reported as tokens/s). Also the
achieved FLOP/s of the engine against a matmul peak measured here, in the same dtype and thread count.

Every phase is timed twice: wall clock, and CPU time of this process (``time.process_time``). On a machine
shared with other jobs the wall clock mostly measures the neighbours; with one thread, CPU time is the work
done, so the CPU-time ratios are the ones to compare there. ``--rounds N`` alternates Shoal and the static
batches N times in one process (both models loaded once) and sums each side's time, so a neighbour's burst
or a falling load lands on both sides of the wall-clock ratio instead of on whichever phase ran first.

Every report names the CPU model and flags (avx2/avx512f/avx512_bf16/amx), and the dtype and quantization the
engine chose (``auto`` by default, as ``shoal serve`` would). Hugging Face runs in the engine's dtype. The
comparison with llama.cpp's ``llama-server`` on the same GGUF is ``bench/serve.py``'s (it needs HTTP).

    .venv/bin/python bench/engine_throughput.py [--threads 1] [--dtype auto] [--quantization auto] [--one-at-a-time 4]
        [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time

import torch

from shoal.cpu_features import cpu_info


class Timer:
    """Wall and CPU seconds of a block (or, with ``add``, of several)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    def add(self, other: Timer) -> Timer:
        self.wall += other.wall
        self.cpu += other.cpu
        return self


def matmul_peak(dtype: torch.dtype, size: int = 1024, reps: int = 20) -> Timer:
    """Times ``reps`` square matmuls in the benchmark's dtype: the ceiling this machine offers the model."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(3):
        a @ b
    with Timer() as timer:
        for _ in range(reps):
            a @ b
    timer.flops = 2 * size**3 * reps
    return timer


def model_flops(cfg, prompt_len: int, output_len: int, num_requests: int) -> float:
    """Matmul + attention FLOPs the engine performs for the workload (LM head only where it samples)."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = cfg.hidden_size * (q + 2 * kv) + q * cfg.hidden_size + 3 * cfg.hidden_size * cfg.intermediate_size
    total_tokens = prompt_len + output_len - 1  # the last sampled token is never fed back
    linear = 2 * cfg.num_layers * per_layer * total_tokens
    # attention: QK^T and PV, each 2 * heads * head_dim FLOPs per (query, key) pair, causal
    pairs = total_tokens * (total_tokens + 1) / 2
    attention = 4 * cfg.num_layers * q * pairs
    lm_head = 2 * cfg.hidden_size * cfg.vocab_size * output_len
    return num_requests * (linear + attention + lm_head)


def load_shoal(dtype: str, quantization: str, max_num_seqs: int, max_num_batched_tokens: int):
    from shoal.engine import LLM, SamplingParams

    llm = LLM(
        "smollm2-135m",
        dtype=dtype,
        quantization=quantization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    llm.generate([[100, 101]] * 2, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))  # warm-up
    return llm


def run_shoal(llm, prompts: list[list[int]], output_len: int) -> Timer:
    from shoal.engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    with Timer() as timer:
        outputs = llm.generate(prompts, params)
    assert all(len(o.token_ids) == output_len for o in outputs)
    return timer


def load_hf(dtype: torch.dtype):
    import transformers

    from shoal.model_registry import resolve_model

    path = resolve_model("smollm2-135m").path
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model.to(dtype).eval()


def run_hf(model, prompts: list[list[int]], output_len: int, batch_size: int) -> Timer:
    """Times transformers ``generate`` over ``prompts`` in static batches (equal lengths: no padding)."""
    kwargs = dict(max_new_tokens=output_len, min_new_tokens=output_len, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(torch.tensor(prompts[:1]), max_new_tokens=4, do_sample=False, pad_token_id=0)  # warm-up
        with Timer() as timer:
            for i in range(0, len(prompts), batch_size):
                batch = torch.tensor(prompts[i : i + batch_size])
                out = model.generate(batch, attention_mask=torch.ones_like(batch), **kwargs)
                assert out.shape[1] == batch.shape[1] + output_len
        return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (2 oversubscribes a shared 2-core box)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float32"))
    parser.add_argument("--quantization", default="auto", choices=("auto", "none", "int4", "int8"))
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--static-batch", type=int, default=16)
    parser.add_argument("--one-at-a-time", type=int, default=4, help="requests timed one at a time (a subset)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=1, help="alternate Shoal and the static batches this many times")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rng = random.Random(0)
    prompts = [[rng.randrange(100, 49000) for _ in range(args.prompt_len)] for _ in range(args.requests)]
    generated = args.requests * args.output_len * args.rounds

    llm = load_shoal(args.dtype, args.quantization, args.requests, args.max_num_batched_tokens)
    engine = llm.engine
    flops = args.rounds * model_flops(engine.model_config, args.prompt_len, args.output_len, args.requests)
    dtype, quantization = engine.dtype, engine.quantization
    peak = matmul_peak(dtype)
    hf = load_hf(dtype)
    shoal, static = Timer(), Timer()
    rounds = []
    for _ in range(args.rounds):
        ours, theirs = run_shoal(llm, prompts, args.output_len), run_hf(hf, prompts, args.output_len, args.static_batch)
        rounds.append({"shoal_wall_s": round(ours.wall, 1), "hf_static_wall_s": round(theirs.wall, 1)})
        shoal.add(ours)
        static.add(theirs)
    single = run_hf(hf, prompts[: args.one_at_a_time], args.output_len, 1)

    report: dict[str, object] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}, {args.threads} threads",
        "cpu": cpu_info().summary(),
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        "dtype": str(dtype).removeprefix("torch."),
        "quantization": quantization,
        "workload": f"{args.requests} requests x {args.prompt_len} prompt + {args.output_len} output tokens",
        "rounds": rounds,
    }
    for clock in ("wall", "cpu"):
        shoal_tps = generated / getattr(shoal, clock)
        static_tps = generated / getattr(static, clock)
        single_tps = args.one_at_a_time * args.output_len / getattr(single, clock)
        peak_flops = peak.flops / getattr(peak, clock)
        report[clock] = {
            "shoal_tok_s": round(shoal_tps, 1),
            "hf_static_batch_tok_s": round(static_tps, 1),
            "hf_one_at_a_time_tok_s": round(single_tps, 1),
            "speedup_vs_static_batch": round(shoal_tps / static_tps, 2),
            "speedup_vs_one_at_a_time": round(shoal_tps / single_tps, 2),
            "shoal_gflop_s": round(flops / getattr(shoal, clock) / 1e9, 1),
            "matmul_peak_gflop_s": round(peak_flops / 1e9, 1),
            "fraction_of_peak": round(flops / getattr(shoal, clock) / peak_flops, 3),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
