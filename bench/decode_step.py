"""CPU time of one decode step (SmolLM2 by default, batch 1 unless ``--batch``), and where it goes.

Builds the offline engine, prefills ``--batch`` requests (distinct prompts, no shared prefix), then times
``--steps`` engine steps that each decode one token for every request, in CPU seconds of this process (``time.process_time``: the work done, not the neighbours' load on a
shared machine) and wall seconds. ``--profile`` adds torch.profiler's table of the ops with the most CPU time
and the share of the step spent outside matrix multiplications (the C kernel's calls show as ``shoal::q4_1`` and
``shoal::q8_0``). ``--kernel torch`` serves the int4 projections on torch's kernel instead of shoal's C kernel
(``SHOAL_CPU_KERNEL=torch``), for a before/after in one run. ``--compare-layer-ops N`` times N blocks of
``--steps`` steps with a layer's small ops (RMSNorm and its residual add, RoPE with the KV write, SiLU-and-mul) on
shoal's C kernel and N on torch, alternating in one process on the same requests, and reports each side's median
block (the machine's drift falls on both sides alike); each op is its own call there (the one-call layers off).
``--compare-decode-stack N`` alternates in the same way every decoder layer in one C call (``DecodeStack``, the
default where the model qualifies) against one call per op through the modules. ``--mixed D:C`` times the steps a
loaded server runs most (``time_mixed_steps``): D sequences decoding, a C-token prompt prefilled alone, and the two
in one step, wall ms each, and the mixed step over the two apart (under 1: the decodes ride on the prefill's pass
over the weights).

    .venv/bin/python bench/decode_step.py [--dtype auto] [--quantization auto] [--threads 1] [--kernel auto|torch]
        [--batch 64] [--profile] [--compare-layer-ops 8] [--compare-decode-stack 8] [--mixed 16:256 ...]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from shoal.cpu_features import cpu_info
from shoal.engine.model.quantized_linear import QuantizedLinear

BLOCK_SIZE = 16  # the engine's default, named where --mixed sizes the KV cache
_PROMPTS = itertools.count()  # time_mixed_steps' prompts, numbered across calls: a prompt met before is cached
MATMUL_OPS = (
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
    "aten::_weight_int4pack_mm_for_cpu",
    "aten::_weight_int8pack_mm",
    "mkldnn::_linear_pointwise",
    "shoal::q4_1",
    "shoal::q8_0",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1, help="requests decoding together")
    parser.add_argument("--kernel", choices=("auto", "torch"), default="auto", help="the int4 projections' kernel")
    parser.add_argument("--profile", action="store_true", help="also print torch.profiler's top ops")
    parser.add_argument("--compare-layer-ops", type=int, default=0, metavar="N", help="alternate N blocks each way")
    parser.add_argument(
        "--compare-decode-stack", type=int, default=0, metavar="N", help="one-call layers vs modules, N blocks each"
    )
    parser.add_argument(
        "--mixed", type=_decodes_and_chunk, nargs="+", default=[], metavar="D:C", help="mixed steps, D decodes + C"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["SHOAL_CPU_KERNEL"] = args.kernel

    from shoal.engine import LLM

    sizing: dict[str, int] = {}
    if args.mixed:  # the decodes and the prompt at once (a CPU's default cache holds some 11k of SmolLM2's tokens)
        decoder_tokens = args.prompt_len + decode_budget(mixed_decode_steps(args.steps))
        decoder_blocks = -(-decoder_tokens // BLOCK_SIZE)
        blocks = max(d * decoder_blocks + -(-c // BLOCK_SIZE) for d, c in args.mixed)
        sizing = {"block_size": BLOCK_SIZE, "num_kv_blocks": max(blocks, args.batch * decoder_blocks) + 1}
    llm = LLM(
        args.model,
        dtype=args.dtype,
        quantization=args.quantization,
        max_num_seqs=max([args.batch, 1, *(d + 1 for d, _ in args.mixed)]),  # a mixed step's prompt is one more
        max_num_batched_tokens=max([2048, *(d + c for d, c in args.mixed)]),
        **sizing,
    )
    engine = llm.engine
    cpu, wall = time_decode_steps(engine, args.batch, args.prompt_len, args.steps)
    report = {
        "cpu": cpu_info().summary(),
        "torch": f"{torch.__version__}, {args.threads} threads",
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "dtype": str(engine.dtype).removeprefix("torch."),
        "quantization": engine.quantization,
        "kernels": sorted({m.kind for m in engine.runner.model.modules() if isinstance(m, QuantizedLinear)}),
        "batch": args.batch,
        "cpu_ms_per_step": round(cpu / args.steps * 1e3, 2),
        "wall_ms_per_step": round(wall / args.steps * 1e3, 2),
    }
    if args.compare_layer_ops:
        report["layer_ops"] = compare_layer_ops(engine, args.batch, args.prompt_len, args.steps, args.compare_layer_ops)
    if args.compare_decode_stack:
        report["decode_stack"] = compare_decode_stack(
            engine, args.batch, args.prompt_len, args.steps, args.compare_decode_stack
        )
    if args.mixed:
        report["mixed"] = [time_mixed_steps(engine, d, c, args.prompt_len, args.steps) for d, c in args.mixed]
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        _label_c_kernel_calls()

        with (
            decoding(engine, args.batch, args.prompt_len, args.steps),
            profile(activities=[ProfilerActivity.CPU]) as prof,
        ):
            for _ in range(args.steps):
                engine.step()
        averages = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in averages)
        matmul = sum(e.self_cpu_time_total for e in averages if e.key in MATMUL_OPS)
        print(averages.table(sort_by="self_cpu_time_total", row_limit=20))
        report["profiled_cpu_ms_per_step"] = round(total / args.steps / 1e3, 2)
        report["profiled_matmul_ms_per_step"] = round(matmul / args.steps / 1e3, 2)
        report["profiled_matmul_share"] = round(matmul / total, 3) if total else None
    print(json.dumps(report, indent=2))


def decode_budget(steps: int) -> int:
    """The tokens a request of :func:`decoding` may generate: ``steps`` and the warm-up, with room to spare."""
    return steps * 2 + 20


def mixed_decode_steps(repeats: int) -> int:
    """The decode steps :func:`time_mixed_steps` runs inside :func:`decoding` for ``repeats``."""
    return 2 * repeats + 2


@contextlib.contextmanager
def decoding(engine: Any, batch: int, prompt_len: int, steps: int) -> Iterator[None]:
    """``batch`` requests (distinct prompts of ``prompt_len`` tokens, room for ``steps`` decodes and more) admitted,
    prefilled and warmed up, so that each ``engine.step()`` inside decodes one token for each; aborted after, so
    the engine is left empty for whatever runs next."""
    from shoal.engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=decode_budget(steps), ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"r{i}", [100 + i, *range(200, 199 + prompt_len)], params)
    try:
        while (
            any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.running)
            or engine.scheduler.waiting
        ):
            engine.step()  # prefills
        for _ in range(5):  # warm-up decodes
            engine.step()
        yield
    finally:
        engine.abort(f"r{i}" for i in range(batch))
        while engine.has_unfinished():
            engine.step()  # reports the aborts


def time_decode_steps(engine: Any, batch: int, prompt_len: int, steps: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``steps`` engine steps that each decode one token for each of ``batch``
    requests (``decoding``). A step returns its tokens to the host, so on a GPU its wall time includes the
    device's work. Also ``bench/gpu_step.py``'s decode step."""
    with decoding(engine, batch, prompt_len, steps):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(steps):
            engine.step()
        return time.process_time() - cpu, time.perf_counter() - wall


def time_mixed_steps(engine: Any, decodes: int, chunk: int, prompt_len: int, repeats: int) -> dict[str, Any]:
    """Wall ms of three kinds of step, each the median of ``repeats`` after one untimed: ``decodes`` sequences
    decoding a token each (``decoding``); a ``chunk``-token prompt prefilled alone; and that prompt's prefill beside
    the decodes in one step, as a server under load runs them. Each prompt is new to the process (its first token
    differs, so no prefix is cached), prefilled in its one step and asks for one token, so it finishes there. Also
    ``bench/gpu_step.py``'s mixed steps."""
    from shoal.engine import SamplingParams

    vocab = engine.model_config.vocab_size
    one_token = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)

    def step_with_prompt(expected_outputs: int) -> float:
        n = next(_PROMPTS)
        engine.add_request(f"prompt{n}", [(n + 1 + j * 7) % vocab for j in range(chunk)], one_token)
        began = time.perf_counter()
        outputs = engine.step()
        seconds = time.perf_counter() - began
        done = [o for o in outputs if o.request_id == f"prompt{n}"]
        if len(outputs) != expected_outputs or not done or not done[0].finished:
            raise RuntimeError(f"the step did not prefill the {chunk}-token prompt beside {decodes} decodes at once")
        return seconds

    prefill = [step_with_prompt(1) for _ in range(repeats + 1)][1:]
    with decoding(engine, decodes, prompt_len, mixed_decode_steps(repeats)):
        decode = []
        for _ in range(repeats + 1):
            began = time.perf_counter()
            engine.step()
            decode.append(time.perf_counter() - began)
        mixed = [step_with_prompt(decodes + 1) for _ in range(repeats + 1)][1:]
    decode_ms, prefill_ms, mixed_ms = (statistics.median(x) * 1e3 for x in (decode[1:], prefill, mixed))
    return {
        "decodes": decodes,
        "chunk": chunk,
        "decode_ms": round(decode_ms, 3),
        "prefill_ms": round(prefill_ms, 3),
        "mixed_ms": round(mixed_ms, 3),
        "mixed_vs_apart": round(mixed_ms / (decode_ms + prefill_ms), 3),
    }


def _decodes_and_chunk(text: str) -> tuple[int, int]:
    decodes, _, chunk = text.partition(":")
    try:
        return int(decodes), int(chunk)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected DECODES:CHUNK (e.g. 16:256), got {text!r}") from None


class _TorchLayerOps:
    """Declines every call, so ``CpuOps`` runs a layer's small ops on torch (its fallback path)."""

    def rms_norm(self, *args: Any) -> None:
        return None

    def rotary_write_kv(self, *args: Any) -> None:
        return None

    def silu_and_mul(self, *args: Any) -> None:
        return None


def compare_layer_ops(engine: Any, batch: int, prompt_len: int, steps: int, blocks: int) -> dict[str, Any]:
    """Median wall ms per step over ``blocks`` blocks of ``steps`` decode steps with the C kernel's small ops and
    as many with torch's, alternating on the same requests; each op one call (the one-call layers off, as they
    run the C ops only)."""
    ops = engine.runner.model.norm.ops
    kernel = getattr(ops, "layer_ops", None)
    if kernel is None:
        raise SystemExit(f"--compare-layer-ops: the {ops.name} backend has no C layer ops to compare")
    model = engine.runner.model
    stack, model.decode_stack = model.decode_stack, None

    def use(layer_ops: Any) -> Callable[[], None]:
        return lambda: setattr(ops, "layer_ops", layer_ops)

    try:
        return _alternate(engine, batch, prompt_len, steps, blocks, {"c": use(kernel), "torch": use(_TorchLayerOps())})
    finally:
        ops.layer_ops, model.decode_stack = kernel, stack


def compare_decode_stack(engine: Any, batch: int, prompt_len: int, steps: int, blocks: int) -> dict[str, Any]:
    """Median wall ms per step over ``blocks`` blocks of ``steps`` decode steps with every layer in one C call
    (``DecodeStack``) and as many with one call per op through the modules, alternating on the same requests."""
    model = engine.runner.model
    stack = getattr(model, "decode_stack", None)
    if stack is None:
        raise SystemExit("--compare-decode-stack: this model and backend run no one-call layers")

    def use(value: Any) -> Callable[[], None]:
        return lambda: setattr(model, "decode_stack", value)

    try:
        return _alternate(engine, batch, prompt_len, steps, blocks, {"stack": use(stack), "modules": use(None)})
    finally:
        model.decode_stack = stack


def _alternate(
    engine: Any, batch: int, prompt_len: int, steps: int, blocks: int, sides: dict[str, Callable[[], None]]
) -> dict[str, Any]:
    """Each side's median wall ms per step over ``blocks`` blocks of ``steps`` steps, the sides taking turns
    (each switched on by its callable) on the same ``batch`` decoding requests."""
    from shoal.engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=len(sides) * blocks * (steps + 1) + 20, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"c{i}", [100 + i, *range(200, 199 + prompt_len)], params)
    while engine.scheduler.waiting or any(
        r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.running
    ):
        engine.step()
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(blocks):
        for side, switch in sides.items():
            switch()
            engine.step()  # one untimed step after the switch
            wall = time.perf_counter()
            for _ in range(steps):
                engine.step()
            times[side].append((time.perf_counter() - wall) / steps * 1e3)
    engine.abort(f"c{i}" for i in range(batch))
    while engine.has_unfinished():
        engine.step()
    (first, a), (second, b) = ((side, statistics.median(t)) for side, t in times.items())
    return {
        "blocks": blocks,
        f"{first}_ms_per_step": round(a, 2),
        f"{second}_ms_per_step": round(b, 2),
        f"{second}_over_{first}": round(b / a, 3),
        **{f"{side}_blocks": [round(x, 2) for x in t] for side, t in times.items()},
    }


def _label_c_kernel_calls() -> None:
    """The C kernels are ctypes calls, not torch ops: a ``record_function`` around each makes the profiler count
    them. The one-call layers show as one ``shoal::decode_layers`` a step (the projections' share is inside it)."""
    from shoal.engine.model.decode_stack import DecodeStack
    from shoal.kernels.cpu import QuantGemv
    from shoal.kernels.cpu.paged_attention import PagedAttention

    call = QuantGemv._call

    def labelled(self: QuantGemv, kind: int, name: str, *args: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function(f"shoal::{name}"):
            return call(self, kind, name, *args)

    attend = PagedAttention.__call__

    def labelled_attention(self: PagedAttention, *args: Any) -> torch.Tensor:
        with torch.profiler.record_function("shoal::paged_attention"):
            return attend(self, *args)

    stack_call = DecodeStack.__call__

    def labelled_stack(self: DecodeStack, *args: Any) -> Any:
        with torch.profiler.record_function("shoal::decode_layers"):
            return stack_call(self, *args)

    QuantGemv._call = labelled  # type: ignore[method-assign]
    PagedAttention.__call__ = labelled_attention  # type: ignore[method-assign]
    DecodeStack.__call__ = labelled_stack  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
