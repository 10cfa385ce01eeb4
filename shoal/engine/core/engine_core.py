"""The engine's step loop: admit requests, schedule a batch, run it, turn tokens into outputs.

Single-threaded by design: the HTTP server drives it from its own step thread, the offline ``LLM`` calls
``step()`` until nothing is left. Requests are validated completely in ``add_request`` before anything
changes, so a bad request is refused with an error naming the field and never disturbs its batch mates.

``EngineCore.from_config`` does the slow, hardware-bound part (resolve and load the model, decide the start-up
plan: device, dtype, KV size, warm-up, graphs; allocate the KV cache, warm up, capture the decode graphs); the
constructor takes those parts ready-made, so ``step()`` runs the same in tests with a stand-in runner that picks
the tokens (``tests/engine/test_engine_step.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import torch

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.decode_graphs import CudaGraphs, DecodeGraphs, GraphFactory
from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.core.gpu_memory import Baseline, profile
from shoal.engine.core.grammar import GrammarCompiler
from shoal.engine.core.model_runner import ModelRunner
from shoal.engine.core.outputs import EngineStats, RequestOutput, SampleLogprobs
from shoal.engine.core.request import Request, RequestStatus
from shoal.engine.core.sampler import Sampler
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.core.scheduler import Scheduler, SchedulerOutput
from shoal.engine.core.startup_plan import (
    HardwarePlan,
    Phases,
    log_startup_plan,
    needs_profile,
    plan_hardware,
    plan_startup,
)
from shoal.engine.core.step_inputs import StepInputs
from shoal.engine.core.step_threads import StepThreads
from shoal.engine.core.stop_checker import TextState, token_stop
from shoal.engine.core.warm_up import run_warm_up
from shoal.engine.loader import WeightsCache, load_config, load_model
from shoal.engine.lora import LoRAAdapter, LoRAError, LoRAManager, read_adapter
from shoal.engine.model import allocate_kv_cache
from shoal.engine.model_config import ModelConfig
from shoal.kernels import get_ops
from shoal.model_registry import resolve_model
from shoal.protocol.kv_events import KVEvent
from shoal.tokenizer import Detokenizer, Tokenizer, detokenizer_for

log = logging.getLogger(__name__)


class _Tracked:
    """What the engine keeps beside a request: its text not handed out yet and its detokenizer."""

    def __init__(self, request: Request, detokenizer: Detokenizer) -> None:
        self.request = request
        self.detokenizer = detokenizer
        self.text = TextState(request.params.stop)


class BatchRunner(Protocol):
    """Runs one scheduled batch: ``ModelRunner`` in production, a stand-in that picks tokens in tests."""

    def execute(self, batch: SchedulerOutput) -> tuple[dict[str, int], dict[str, SampleLogprobs]]: ...


class EngineCore:
    """Owns the scheduler, the model runner and every request in flight; ``from_config`` builds it for a model."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        model_name: str,
        tokenizer: Tokenizer,
        model_config: ModelConfig,
        plan: HardwarePlan,
        max_model_len: int,
        scheduler: Scheduler,
        sampler: Sampler,
        runner: BatchRunner,
        lora: LoRAManager | None = None,
    ) -> None:
        self.config = config
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.model_config = model_config
        self.plan = plan
        self.max_model_len = max_model_len
        self.eos_token_ids = stop_token_ids(tokenizer, model_config)
        self.grammars = GrammarCompiler(tokenizer, model_config.vocab_size, self.eos_token_ids)
        self.scheduler = scheduler
        self.block_manager = scheduler.block_manager
        self.sampler = sampler
        self.runner = runner
        self.lora = lora
        self._tracked: dict[str, _Tracked] = {}
        self._aborted: list[Request] = []
        self._kv_event_seq = 0
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._finished_by_reason: dict[str, int] = {}
        self.startup_phases: dict[str, float] = {}  # seconds per phase of ``from_config``, for the server's metrics

    @classmethod
    def from_config(
        cls, config: EngineConfig, step_threads: StepThreads | None = None, make_graph: GraphFactory | None = None
    ) -> EngineCore:
        """Loads the model on the hardware chosen for it, sizes and allocates its KV cache as the start-up plan
        says, warms it up and captures its decode graphs; ``step_threads`` (a server's) sets torch's thread count
        per step; ``make_graph`` records graphs (default: CUDA graphs on a CUDA device, none elsewhere)."""
        phases = Phases()
        source = resolve_model(config.model)
        tokenizer = Tokenizer.from_source(source)
        hardware = plan_hardware(config, source)
        ops = get_ops(config.attention_backend, hardware.device)
        profiled = needs_profile(config, hardware)
        with phases.timed("loading"):
            baseline = Baseline.before_loading(load_config(source), hardware.dtype, ops) if profiled else None
            cache = WeightsCache(Path(config.weights_cache_dir)) if config.weights_cache_dir else None
            model = load_model(source, hardware.dtype, ops, hardware.device, hardware.quantization, cache)
        lora = None
        if config.enable_lora:
            lora = LoRAManager.wrap(model, config.max_loras, config.max_lora_rank, ops, hardware.dtype, hardware.device)
        sampler = Sampler(sorted(stop_token_ids(tokenizer, model.config)), config.seed, hardware.device)
        card = None
        with phases.timed("profiling"):  # on a GPU whose KV size is not given, else nothing to measure
            if baseline is not None:
                tokens = min(
                    config.max_num_batched_tokens, config.max_model_len or model.config.max_position_embeddings
                )
                card = profile(model, hardware.dtype, baseline, tokens, config.block_size, sampler, lora)
        if make_graph is None and hardware.device == "cuda":
            make_graph = CudaGraphs()
        weights = cache.outcome if cache is not None else "converted cache off"
        plan = plan_startup(config, hardware, model.config, card, make_graph is not None, weights)
        log_startup_plan(plan)
        block_manager = BlockManager(
            plan.kv.num_blocks, config.block_size, config.enable_prefix_caching, model.config.window_of_every_layer
        )
        sizes = plan.graphs.sizes
        kv_caches = allocate_kv_cache(  # with graphs, one scratch block past the engine's for their pad rows
            model.config,
            block_manager.num_cache_blocks + bool(sizes),
            config.block_size,
            hardware.dtype,
            hardware.device,
        )
        graphs = None
        if make_graph is not None and sizes:
            graphs = DecodeGraphs(model, kv_caches, sizes, plan.kv.max_model_len, make_graph)
        scheduler = Scheduler(
            block_manager, config.max_num_batched_tokens, config.max_num_seqs, lora.slots if lora else None
        )
        inputs = StepInputs(
            config.max_num_seqs,
            config.max_num_batched_tokens,
            plan.kv.max_model_len,
            config.block_size,
            hardware.device,
        )
        runner = ModelRunner(model, kv_caches, inputs, sampler, hardware.device, step_threads, lora)
        core = cls(
            config,
            model_name=source.served_name,
            tokenizer=tokenizer,
            model_config=model.config,
            plan=hardware,
            max_model_len=plan.kv.max_model_len,
            scheduler=scheduler,
            sampler=sampler,
            runner=runner,
            lora=lora,
        )
        with phases.timed("warming"):
            run_warm_up(core, plan.warm_up)
        if graphs is not None:
            with phases.timed("capturing"):
                runner.capture_graphs(graphs)
        log.info("%s", phases.summary())
        core.startup_phases = phases.seconds
        for name, path in config.lora_modules:
            core.add_lora(core.read_lora(name, path))
        return core

    def clear_counters(self) -> None:
        """Starts the request and token counters from zero (after warm-up, whose requests are not traffic)."""
        self._prompt_tokens = self._generation_tokens = 0
        self._finished_by_reason = {}
        self.scheduler.num_preemptions = 0
        blocks = self.block_manager
        blocks.prefix_queried_tokens = blocks.prefix_hit_tokens = 0

    @property
    def device(self) -> str:
        return self.plan.device

    @property
    def dtype(self) -> torch.dtype:
        return self.plan.dtype

    @property
    def quantization(self) -> str:
        return self.plan.quantization

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        arrival_time: float | None = None,
        priority: int = 0,
        lora_name: str | None = None,
    ) -> None:
        """Validates and queues a request; raises ``InvalidRequestError`` and changes nothing if it is bad.
        ``lora_name`` runs it through that loaded adapter."""
        if request_id in self._tracked:
            raise InvalidRequestError("request_id", f"{request_id!r} is already in the engine")
        if lora_name is not None and (self.lora is None or lora_name not in self.lora.adapters):
            raise InvalidRequestError("model", f"no LoRA adapter {lora_name!r} is loaded")
        params.validate()
        self._check_in_vocabulary("stop_token_ids", params.stop_token_ids)
        self._check_in_vocabulary("logit_bias", list(params.logit_bias))
        token_ids = self._prompt_token_ids(prompt)
        grammar = self.grammars.matcher(params.structured_output) if params.structured_output else None
        if len(token_ids) >= self.max_model_len:
            raise InvalidRequestError(
                "prompt",
                f"the prompt has {len(token_ids)} tokens but max_model_len is {self.max_model_len} "
                "(the prompt plus at least one generated token must fit)",
            )
        request = Request(
            request_id,
            token_ids,
            params,
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
            priority=priority,
            max_output_tokens=min(params.max_tokens, self.max_model_len - len(token_ids)),
            lora_name=lora_name,
        )
        request.grammar = grammar
        detokenizer = detokenizer_for(self.tokenizer, params.skip_special_tokens, token_ids)
        self._tracked[request_id] = _Tracked(request, detokenizer)
        self.scheduler.add_request(request)

    def abort(self, request_ids: Iterable[str]) -> None:
        """Frees the requests' blocks now; the next ``step()`` reports them finished with reason "abort"."""
        for request_id in request_ids:
            tracked = self._tracked.get(request_id)
            if tracked is None or tracked.request.is_finished:
                continue
            self._finish(tracked.request, RequestStatus.FINISHED_ABORTED)
            self._aborted.append(tracked.request)

    def has_unfinished(self) -> bool:
        return bool(self._tracked)

    def read_lora(self, name: str, path: str, reserved: Iterable[str] = ()) -> LoRAAdapter:
        """Reads and checks an adapter (any thread: it touches no engine state); ``reserved`` are names clients
        already use for the base model. Raises ``LoRAError``."""
        if self.lora is None:
            raise LoRAError("lora_name", "LoRA is not enabled on this engine (start it with --enable-lora)")
        if name in {self.model_name, *reserved}:
            raise LoRAError("lora_name", f"{name!r} is the base model's name; an adapter needs a name of its own")
        return read_adapter(name, Path(path), self.lora.shapes, self.lora.max_rank)

    def add_lora(self, adapter: LoRAAdapter) -> None:
        """Makes a read adapter servable under its name (step thread)."""
        assert self.lora is not None, "read_lora refuses adapters when LoRA is off"
        if adapter.name in self.lora.adapters:
            raise LoRAError("lora_name", f"an adapter named {adapter.name!r} is already loaded")
        self.lora.add(adapter)

    def remove_lora(self, name: str) -> None:
        """Unloads an adapter no request uses any more (step thread)."""
        if self.lora is None or name not in self.lora.adapters:
            raise LoRAError("lora_name", f"no LoRA adapter {name!r} is loaded", status=404)
        in_flight = sum(1 for t in self._tracked.values() if t.request.lora_name == name)
        if in_flight:
            raise LoRAError("lora_name", f"adapter {name!r} has {in_flight} requests in flight; unload it after them")
        self.lora.remove(name)

    @staticmethod
    def stepping() -> AbstractContextManager[None]:
        """torch's inference mode, for a caller that steps the engine in a loop: held around the loop, each step
        does not enter it again (23-26 us a step at batch 1, docs/history/2026-12-06-step-host-batch1.md)."""
        return torch.inference_mode()

    def step(self) -> list[RequestOutput]:
        """Runs one batch; returns what every request gained (and the aborts since the last step)."""
        outputs = [self._output(r, self._tracked[r.request_id], [], None) for r in self._aborted]
        self._aborted = []
        batch = self.scheduler.schedule()
        if batch.is_empty:
            return outputs
        now = time.monotonic()
        for request in batch.scheduled:
            if request.metrics.first_scheduled_time is None:
                request.metrics.first_scheduled_time = now
        tokens, logprobs = self.runner.execute(batch)
        got_token = self.scheduler.update_from_output(batch, tokens)
        now = time.monotonic()
        for request in got_token:
            outputs.append(self._on_token(request, logprobs.get(request.request_id), now))
        return outputs

    def stats(self) -> EngineStats:
        blocks = self.block_manager
        return EngineStats(
            num_running=self.scheduler.num_running,
            num_waiting=self.scheduler.num_waiting,
            kv_usage=blocks.usage,
            num_free_blocks=blocks.num_free_blocks,
            num_total_blocks=blocks.num_blocks,
            prefix_queried_tokens=blocks.prefix_queried_tokens,
            prefix_hit_tokens=blocks.prefix_hit_tokens,
            num_preemptions=self.scheduler.num_preemptions,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
            finished_by_reason=dict(self._finished_by_reason),
            **self._lora_stats(),
        )

    def _lora_stats(self) -> dict:
        """Requests by adapter, running and waiting (every known adapter listed), and the slots' evictions."""
        if self.lora is None:
            return {}
        running = dict.fromkeys(self.lora.adapters, 0)
        waiting = dict.fromkeys(self.lora.adapters, 0)
        for tracked in self._tracked.values():
            request = tracked.request
            if request.lora_name is not None and not request.is_finished:
                counts = running if request.status == RequestStatus.RUNNING else waiting
                counts[request.lora_name] = counts.get(request.lora_name, 0) + 1
        return {"lora_running": running, "lora_waiting": waiting, "lora_evictions": self.lora.slots.num_evictions}

    def kv_snapshot(self) -> list[int]:
        """Every block hash the prefix cache holds now (the first message of a KV event stream)."""
        return self.block_manager.cached_hashes()

    def drain_kv_events(self) -> list[KVEvent]:
        """The stored / removed hash events since the last call, numbered by an engine-wide counter."""
        events = []
        for kind, hashes in self.block_manager.drain_events():
            events.append(KVEvent(type=kind, seq=self._kv_event_seq, hashes=hashes))
            self._kv_event_seq += 1
        return events

    def _prompt_token_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            token_ids = self.tokenizer.encode(prompt)
        else:
            token_ids = list(prompt)
            self._check_in_vocabulary("prompt", token_ids)
        if not token_ids:
            raise InvalidRequestError("prompt", "the prompt is empty")
        return token_ids

    def _check_in_vocabulary(self, field: str, token_ids: list[int]) -> None:
        """A token id the model has no logit for would fail a step for the whole batch, so it is refused here."""
        vocab = self.model_config.vocab_size
        bad = next((t for t in token_ids if not isinstance(t, int) or not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidRequestError(field, f"token id {bad!r} is outside the vocabulary [0, {vocab})")

    def _on_token(self, request: Request, logprobs: SampleLogprobs | None, now: float) -> RequestOutput:
        token_id = request.all_token_ids[-1]
        metrics = request.metrics
        if metrics.first_token_time is None:
            metrics.first_token_time = now
            self._prompt_tokens += request.num_prompt_tokens
        metrics.last_token_time = now
        self._generation_tokens += 1
        tracked = self._tracked[request.request_id]
        stop: tuple[RequestStatus, str | int | None] | None = token_stop(request, token_id, self.eos_token_ids)
        grammar_done = request.grammar is not None and self._advance_grammar(request, token_id)
        if stop is None or stop[0] == RequestStatus.FINISHED_LENGTH:
            new_text = tracked.detokenizer.push([token_id])
            if stop is not None or grammar_done:  # the end: release a character still waiting for its last byte
                new_text += tracked.detokenizer.flush()
            stop_string = tracked.text.append(new_text, request.num_output_tokens >= request.params.min_tokens)
            if stop_string is not None:
                stop = (RequestStatus.FINISHED_STOPPED, stop_string)
            elif grammar_done:
                stop = (RequestStatus.FINISHED_STOPPED, None)
        if stop is not None:
            request.stop_reason = stop[1]
            self._finish(request, stop[0])
        return self._output(request, tracked, [token_id], [logprobs] if logprobs is not None else None)

    @staticmethod
    def _advance_grammar(request: Request, token_id: int) -> bool:
        """Feeds the token to the request's matcher; True once the grammar admits nothing more (the output is
        complete). The mask only offers tokens the matcher accepts, so a refusal is a bug: logged, and the request
        ends rather than continue unconstrained."""
        grammar = request.grammar
        assert grammar is not None
        if not grammar.consume_token(token_id):
            log.error("request %s: the grammar refused token %d: %s", request.request_id, token_id, grammar.get_error())
            return True
        return grammar.is_stopped()

    def _finish(self, request: Request, status: RequestStatus) -> None:
        self.scheduler.finish_request(request, status)
        request.grammar = None  # frees the matcher
        self.sampler.forget(request.request_id)
        request.metrics.finished_time = time.monotonic()
        reason = status.finish_reason or "abort"
        self._finished_by_reason[reason] = self._finished_by_reason.get(reason, 0) + 1

    def _output(
        self, request: Request, tracked: _Tracked, token_ids: list[int], logprobs: list[SampleLogprobs] | None
    ) -> RequestOutput:
        finished = request.is_finished
        if finished:
            del self._tracked[request.request_id]
        return RequestOutput(
            request_id=request.request_id,
            new_token_ids=token_ids,
            new_text=tracked.text.take(finished),
            new_logprobs=logprobs,
            finished=finished,
            finish_reason=request.status.finish_reason,
            stop_reason=request.stop_reason,
            num_prompt_tokens=request.num_prompt_tokens,
            num_cached_tokens=request.num_cached_tokens,
            num_output_tokens=request.num_output_tokens,
            metrics=request.metrics,
            lora_name=request.lora_name,
        )


def stop_token_ids(tokenizer: Tokenizer, model_config: ModelConfig) -> frozenset[int]:
    """End-of-sequence ids from both the tokenizer and the model's config (checkpoints name them in either)."""
    return frozenset(tokenizer.eos_token_ids) | frozenset(model_config.eos_token_ids)
