"""Warm before ready: the forwards that build every kernel variant before the first request pays for them.

Triton compiles a kernel for each new set of constants on first launch (a second or more each on a GPU), and
oneDNN builds its primitives for each new shape on a CPU; a replica that is ready before that makes its first
clients wait. So before ``/ready`` the engine runs, through its own scheduler and runner exactly as traffic does:

- one prefill of ``min(max_num_batched_tokens, max_model_len - 1, cache tokens - 1)`` tokens: the largest chunk a
  step can carry. On a CPU at most ``CPU_PREFILL_TOKENS``: nothing is compiled there, oneDNN keys its primitives
  by shape (one long prefill warms that one shape only), and SmolLM2's 2,048-token chunk cost 2.6 s of every
  start on two cores for nothing a shorter chunk through the same paths does not build;
- decode steps at batch sizes ``max_num_seqs``, 8, 4, 2 and 1 (the small ones are where the CPU's quantized
  projections and thread counts change), in one group: ``max_num_seqs``
  one-token prompts, request ``j`` generating one token more than the number of sizes above ``j``, so each decode
  step the batch shrinks to the next size. The sizes are limited by the step's token budget and the cache's
  blocks.

On a GPU the decode graphs are captured after it, each size run once eagerly first (``decode_graphs``).

Warm-up is not traffic: prefix caching is off while it runs (no block is named, so no cache entry or KV event is
left), its blocks all return to the free queue, and the engine's counters start from zero afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shoal.engine.core.kv_budget import KvBudget
from shoal.engine.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from shoal.engine.core.engine_core import EngineCore

WARM_TOKEN = 0  # every warm-up prompt repeats it: any id in the vocabulary runs the same kernels
SMALL_BATCHES = (1, 2, 4, 8)
CPU_PREFILL_TOKENS = 256  # a prefill long enough for the CPU's GEMM paths (not the small-batch kernels)


@dataclass(frozen=True)
class WarmUp:
    prefill_tokens: int
    decode_batch_sizes: tuple[int, ...]

    def summary(self) -> str:
        sizes = ", ".join(map(str, self.decode_batch_sizes))
        return f"warm-up: a prefill of {self.prefill_tokens} tokens, decode steps at batch sizes {sizes}"


def plan_warm_up(max_num_batched_tokens: int, max_num_seqs: int, kv: KvBudget, device: str = "cuda") -> WarmUp:
    """The warm-up for this engine's limits, cache and device (pure)."""
    chunk = max_num_batched_tokens if device != "cpu" else min(max_num_batched_tokens, CPU_PREFILL_TOKENS)
    prefill = max(min(chunk, kv.max_model_len - 1, kv.tokens - 1), 1)
    # a decode request holds at most 1 + (len(SMALL_BATCHES) + 1) + 1 tokens; its prompt takes 1 of the first step's
    largest = min(max_num_seqs, max_num_batched_tokens, kv.num_blocks // -(-(len(SMALL_BATCHES) + 3) // kv.block_size))
    sizes = {s for s in SMALL_BATCHES if s <= largest} | ({largest} if largest else set())
    return WarmUp(prefill, tuple(sorted(sizes)))


def decode_lengths(sizes: tuple[int, ...]) -> list[int]:
    """Tokens each decode request generates so that decode step ``k`` runs the ``k``-th largest size."""
    return [1 + sum(1 for s in sizes if s > j) for j in range(max(sizes, default=0))]


def run_warm_up(core: EngineCore, warm: WarmUp) -> None:
    """Runs ``warm`` through ``core`` and leaves it as it was: every block free, nothing cached, counters zero."""
    blocks = core.block_manager
    caching, blocks.enable_prefix_caching = blocks.enable_prefix_caching, False
    try:
        _run(core, [([WARM_TOKEN] * warm.prefill_tokens, 1)])
        _run(core, [([WARM_TOKEN], n) for n in decode_lengths(warm.decode_batch_sizes)])
    finally:
        blocks.enable_prefix_caching = caching
    core.clear_counters()


def _run(core: EngineCore, requests: list[tuple[list[int], int]]) -> None:
    """Adds the requests (prompt, tokens to generate) and steps until they are done."""
    for i, (prompt, max_tokens) in enumerate(requests):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        core.add_request(f"warm-up-{i}", prompt, params)
    while core.has_unfinished():
        core.step()
