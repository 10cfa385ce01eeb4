"""Runs one scheduled batch through the model: flat inputs in, one sampled token per finishing chunk out.

Every scheduled request contributes the slice ``all_token_ids[computed : computed + n]`` of its tokens; the
model only computes logits for the last token of the requests whose chunk reaches the end of what they know
(a prefill chunk in the middle of a prompt samples nothing). The inputs and attention metadata are written into
persistent host buffers and reach the device in one copy (``StepInputs``). In a server, ``StepThreads`` picks
torch's thread count for each batch from its kind and the times earlier batches of that kind took (measured
here, around the forward pass and sampling). On a GPU a decode-only step whose batch fits a captured size replays
its CUDA graph instead of launching the forward (``DecodeGraphs``); every other step runs eagerly.
"""

from __future__ import annotations

import logging
import time

import torch

from shoal.engine.core.decode_graphs import DecodeGraphs
from shoal.engine.core.outputs import SampleLogprobs
from shoal.engine.core.sampler import Sampler
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.engine.core.step_inputs import StepInputs
from shoal.engine.core.step_threads import StepThreads
from shoal.engine.lora.manager import LoRAManager
from shoal.engine.model import Model
from shoal.engine.model.decode_stack import bind as bind_decode_stack
from shoal.engine.model.llama import CausalLM

log = logging.getLogger(__name__)


class ModelRunner:
    """Owns the model and its KV cache tensors."""

    def __init__(
        self,
        model: Model,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        inputs: StepInputs,
        sampler: Sampler,
        device: str = "cpu",
        step_threads: StepThreads | None = None,
        lora: LoRAManager | None = None,
    ) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.inputs = inputs
        self.sampler = sampler
        self.device = device
        self.step_threads = step_threads
        self.lora = lora
        self.graphs: DecodeGraphs | None = None  # set once captured
        if isinstance(model, CausalLM):
            model.decode_stack = bind_decode_stack(model)

    @torch.inference_mode()
    def capture_graphs(self, graphs: DecodeGraphs) -> None:
        """Records the decode graphs (at start-up, after warm-up) with no LoRA row, then replays them."""
        if self.lora is not None:
            self.lora.prepare([], self.device)
        graphs.capture()
        self.graphs = graphs

    def execute(self, batch: SchedulerOutput) -> tuple[dict[str, int], dict[str, SampleLogprobs]]:
        """Runs the batch; returns the sampled token and (if asked) its logprobs per finishing request.

        In torch's inference mode: the caller's, if it holds one around its loop of steps (``EngineCore.stepping``),
        else entered here for the step.
        """
        if not torch.is_inference_mode_enabled():
            with torch.inference_mode():
                return self.execute(batch)
        if self.step_threads is None:
            return self._execute(batch)
        rows, tokens = len(batch.scheduled), batch.total_num_scheduled_tokens
        threads = self.step_threads.threads_for(rows, tokens)
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        start = time.perf_counter()
        result = self._execute(batch)
        kind = self.step_threads.kind(rows, tokens)
        choice = kind.choice
        self.step_threads.observe(threads, rows, tokens, time.perf_counter() - start)
        if kind.choice != choice:
            small = kind is self.step_threads.small
            unit = "ms a step" if small else "ms a token"
            ms = {n: round(s * 1e3, 2) for n, s in sorted(kind.seconds.items())}
            log.info(
                "%s steps now on %d torch threads (%s by threads: %s)",
                "small decode" if small else "large and prefill",
                kind.choice,
                unit,
                ms,
            )
        return result

    def _execute(self, batch: SchedulerOutput) -> tuple[dict[str, int], dict[str, SampleLogprobs]]:
        step = self.inputs.prepare(batch)
        adapted = False
        if self.lora is not None:
            slots = self.lora.slots
            row_slots = [
                (None if r.lora_name is None else slots.slot_of(r.lora_name), n)
                for r, n in zip(batch.scheduled, step.query_lens, strict=True)
            ]
            self.lora.prepare(row_slots, self.device)
            adapted = any(slot is not None for slot, _ in row_slots)
        logits = self.graphs.replay(step) if self.graphs is not None and not adapted else None
        if logits is None:
            logits = self.model(step.input_ids, step.positions, self.kv_caches, step.meta, step.logits_indices)
        sampling = step.sampling
        if not sampling:
            return {}, {}
        token_ids, logprobs = self.sampler.sample(logits, sampling)
        tokens = {r.request_id: t for r, t in zip(sampling, token_ids, strict=True)}
        return tokens, {r.request_id: lp for r, lp in zip(sampling, logprobs, strict=True) if lp is not None}
