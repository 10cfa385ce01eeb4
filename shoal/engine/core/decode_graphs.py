"""Decode steps replayed from CUDA graphs: one launch and a few copies instead of hundreds of kernel launches.

Design (nano-vllm's ``capture_cudagraph``, vLLM's capture sizes). A decode-only step has the same shape every
time for a given batch size, so before ``/ready`` the engine records the model's forward once per batch-size
bucket (1, 2, 4, 8, then every multiple of 8 up to 256 and of 16 above, up to ``max_num_seqs`` or
``max_cudagraph_capture_size``, and that limit itself) and afterwards replays the recording. A recording reads
and writes fixed addresses, so every bucket is a prefix of one set of static buffers (input ids, positions and
slot mapping as the rows of one int64 tensor, sequence lengths, block tables as wide as ``max_model_len``, and
the float logits of every row), and a step copies its inputs into them (three copies: the step's arena keeps
its ids, positions and slots back to back), replays the smallest bucket that holds its batch, and reads its
rows' logits back as a view.

Padding. A batch of 3 replays bucket 4: the extra row computes a token nobody reads. Its key and value are
written to a scratch block, one block past the cache's own (the block manager never hands it out), its sequence
length is 1 and its block table points at that block, so it reads one position of it: a pad row never touches
a real block. Rows only need resetting when a smaller batch follows a larger one (the rows the larger one
left).

What is captured: the forward up to the logits of every row (the LM head included). Sampling, grammars' token
masks and logprobs stay outside: they read the logits view after the replay. What runs eagerly: prefills and
mixed steps (their shape changes with every chunk), decode batches above the largest bucket, and batches in
which a row uses a LoRA adapter (the adapters' row masks are made per step on the host). A mixture-of-experts
model captures nothing: its routing reads the experts' token counts on the host every step.

The attention kernels pick their split-KV count from the metadata's ``max_seq_len``; a graph's metadata says
``max_model_len`` (an upper bound, as the field allows), so the count is fixed per bucket and a short context
leaves the extra segments empty (the merge weighs them at zero). On a CPU there are no graphs: tests drive this
module with a stand-in that records the forward and re-runs it on the static buffers
(``tests/engine/graph_stand_in.py``); the CUDA lane replays real graphs (``tests/engine/test_decode_graphs_cuda.py``).
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from shoal.engine.core.step_inputs import StepBatch
from shoal.engine.model import Model
from shoal.kernels import AttentionMetadata


class Graph(Protocol):
    """One recorded forward: ``torch.cuda.CUDAGraph`` on a GPU (``CudaGraphs``), a named stand-in in CPU tests."""

    def capture(self, forward: Callable[[], None]) -> None: ...

    def replay(self) -> None: ...


GraphFactory = Callable[[], Graph]


class CudaGraphs:
    """Makes CUDA graphs that share one memory pool: captured largest first, the smaller ones fit in its memory."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self) -> Graph:
        return _CudaGraph(self)


class _CudaGraph:
    def __init__(self, graphs: CudaGraphs) -> None:
        self.graphs = graphs
        self.graph = torch.cuda.CUDAGraph()

    def capture(self, forward: Callable[[], None]) -> None:
        forward()  # eagerly first: Triton compiles and cuBLAS's workspace is allocated outside the recording
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph, pool=self.graphs.pool):
            forward()

    def replay(self) -> None:
        self.graph.replay()


@dataclass(frozen=True)
class GraphPlan:
    """The batch sizes to capture (none: every step runs eagerly), and why."""

    sizes: tuple[int, ...]
    reason: str

    def summary(self) -> str:
        if not self.sizes:
            return f"cuda graphs off ({self.reason})"
        return f"cuda graphs for decode batch sizes {', '.join(map(str, self.sizes))} ({self.reason})"


def capture_sizes(max_num_seqs: int, max_capture_size: int) -> tuple[int, ...]:
    """1, 2, 4, 8, every multiple of 8 to 256 and of 16 above it, up to the limit, and the limit itself."""
    limit = min(max_num_seqs, max_capture_size)
    ladder = [1, 2, 4, *range(8, 256, 8), *range(256, limit + 1, 16)]
    return tuple(sorted({s for s in ladder if s <= limit} | {limit}))


def plan_graphs(
    enforce_eager: bool, can_capture: bool, moe: bool, max_num_seqs: int, max_capture_size: int
) -> GraphPlan:
    """Which decode batch sizes the engine captures (pure); ``can_capture``: a CUDA device (or a test's stand-in)."""
    if enforce_eager:
        return GraphPlan((), "--enforce-eager" + ("" if can_capture else "; a CPU never uses them"))
    if not can_capture:
        return GraphPlan((), "a CPU runs every step eagerly: graphs are CUDA's")
    if moe:
        return GraphPlan((), "a mixture of experts reads its routing on the host every step")
    sizes = capture_sizes(max_num_seqs, max_capture_size)
    return GraphPlan(sizes, "captured before ready; prefills, larger batches and LoRA batches run eagerly")


def bucket_for(sizes: tuple[int, ...], num_seqs: int) -> int | None:
    """The smallest captured size that holds ``num_seqs`` rows; None above the largest."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


class DecodeGraphs:
    """The static buffers and one recorded forward per batch size; ``replay`` runs a decode step through them."""

    def __init__(
        self,
        model: Model,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        sizes: tuple[int, ...],
        max_model_len: int,
        make_graph: GraphFactory,
    ) -> None:
        k_cache = kv_caches[0][0]
        device = k_cache.device
        self.model = model
        self.kv_caches = kv_caches
        self.sizes = sizes
        self.max_model_len = max_model_len
        self.make_graph = make_graph
        self.block_size = int(k_cache.shape[1])
        self.scratch_block = int(k_cache.shape[0]) - 1  # allocated for the graphs, past every block the engine uses
        n = sizes[-1]
        width = -(-max_model_len // self.block_size)
        self.tokens = torch.zeros(3, n, dtype=torch.int64, device=device)  # input ids, positions, slot mapping
        self.tokens[2].fill_(self.scratch_block * self.block_size)
        self.query_start_loc = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.block_tables = torch.full((n, width), self.scratch_block, dtype=torch.int32, device=device)
        self.logits_indices = torch.arange(n, dtype=torch.int64, device=device)
        self.logits = torch.zeros(n, model.config.vocab_size, dtype=torch.float32, device=device)
        self.graphs: dict[int, Graph] = {}
        self._real_rows = 0  # rows holding a real step's inputs (to reset when a smaller batch follows)

    def capture(self) -> None:
        """Records the forward at every size, largest first, on pad rows only (they write the scratch block)."""
        gc.freeze()  # torch.cuda.graph collects before each capture: a walk of the whole heap each, unless frozen
        try:
            for size in reversed(self.sizes):
                graph = self.make_graph()
                graph.capture(self._forward(size))
                self.graphs[size] = graph
        finally:
            gc.unfreeze()

    def replay(self, step: StepBatch) -> torch.Tensor | None:
        """The sampled rows' logits of a decode-only step that fits a bucket, by replay; None: run it eagerly."""
        meta = step.meta
        if not meta.is_decode_only:
            return None
        s = meta.num_seqs
        size = bucket_for(self.sizes, s)
        if size is None:
            return None
        self.tokens[:, :s].copy_(step.arena[: 3 * s].view(3, s))  # the arena's ids, positions and slots, back to back
        self.seq_lens[:s].copy_(meta.seq_lens)
        self.block_tables[:s, : meta.block_tables.shape[1]].copy_(meta.block_tables)
        if self._real_rows > s:
            self._pad(s, self._real_rows)
        self._real_rows = s
        self.graphs[size].replay()
        logits = self.logits[:s]
        return logits if step.logits_indices.shape[0] == s else logits[step.logits_indices]

    def _pad(self, start: int, end: int) -> None:
        """Rows ``start:end`` become pad rows again: scratch slot and block, one position."""
        self.tokens[2, start:end].fill_(self.scratch_block * self.block_size)
        self.seq_lens[start:end].fill_(1)
        self.block_tables[start:end, 0].fill_(self.scratch_block)

    def _forward(self, size: int) -> Callable[[], None]:
        """The forward at ``size`` rows over the static buffers. Its views are made on each call (a recording makes
        them once): the torch path keeps a forward's RoPE rows by the identity of its positions tensor."""

        def forward() -> None:
            meta = AttentionMetadata(
                query_start_loc=self.query_start_loc[: size + 1],
                seq_lens=self.seq_lens[:size],
                block_tables=self.block_tables[:size],
                slot_mapping=self.tokens[2, :size],
                max_query_len=1,
                max_seq_len=self.max_model_len,  # fixes the split-KV count per bucket
            )
            tokens = self.tokens[:, :size]
            logits = self.model(tokens[0], tokens[1], self.kv_caches, meta, self.logits_indices[:size])
            self.logits[:size].copy_(logits)

        return forward
