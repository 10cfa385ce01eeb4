"""Runs one scheduled batch through the model: flat inputs in, one sampled token per finishing chunk out.

Every scheduled request contributes the slice ``all_token_ids[computed : computed + n]`` of its tokens; the
model only computes logits for the last token of the requests whose chunk reaches the end of what they know
(a prefill chunk in the middle of a prompt samples nothing). Host-side metadata is built once per step from
plain lists and turned into tensors in one go.
"""

from __future__ import annotations

import torch

from shoal.engine.core.outputs import SampleLogprobs
from shoal.engine.core.request import Request
from shoal.engine.core.sampler import Sampler
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.engine.model import CausalLM
from shoal.kernels import AttentionMetadata


class ModelRunner:
    """Owns the model and its KV cache tensors."""

    def __init__(
        self,
        model: CausalLM,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        block_size: int,
        sampler: Sampler,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.sampler = sampler
        self.device = device

    @torch.inference_mode()
    def execute(self, batch: SchedulerOutput) -> tuple[dict[str, int], dict[str, SampleLogprobs]]:
        """Runs the batch; returns the sampled token and (if asked) its logprobs per finishing request."""
        input_ids: list[int] = []
        query_lens: list[int] = []
        seq_lens: list[int] = []
        block_tables: list[list[int]] = []
        logits_indices: list[int] = []
        sampling: list[Request] = []
        for request in batch.scheduled:
            start = request.num_computed_tokens
            end = start + batch.num_scheduled_tokens[request.request_id]
            input_ids.extend(request.all_token_ids[start:end])
            query_lens.append(end - start)
            seq_lens.append(end)
            block_tables.append(request.block_ids)
            if end == request.num_tokens:
                sampling.append(request)
                logits_indices.append(len(input_ids) - 1)
        meta = AttentionMetadata.build(query_lens, seq_lens, block_tables, self.block_size, self.device)
        positions = _positions(query_lens, seq_lens)
        logits = self.model(
            torch.tensor(input_ids, dtype=torch.long, device=self.device),
            positions.to(self.device),
            self.kv_caches,
            meta,
            torch.tensor(logits_indices, dtype=torch.long, device=self.device),
        )
        if not sampling:
            return {}, {}
        token_ids, logprobs = self.sampler.sample(logits, sampling)
        tokens = {r.request_id: t for r, t in zip(sampling, token_ids, strict=True)}
        return tokens, {r.request_id: lp for r, lp in zip(sampling, logprobs, strict=True) if lp is not None}


def _positions(query_lens: list[int], seq_lens: list[int]) -> torch.Tensor:
    """Positions of every new token: the last ``query_len`` positions of each sequence."""
    lens = torch.tensor(query_lens, dtype=torch.long)
    ends = torch.tensor(seq_lens, dtype=torch.long)
    starts = torch.repeat_interleave(ends - lens, lens)
    offsets = torch.arange(int(lens.sum())) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
    return starts + offsets
