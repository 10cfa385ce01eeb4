"""Decides, step by step, which requests run and how many of their tokens go into the batch.

Design (vLLM v1). A request is two counters: tokens known (prompt + generated) and tokens computed (in the
KV cache). Each step hands out at most ``max_num_batched_tokens`` tokens: first to the running requests, in
order, each getting what closes its gap (one token for a decode, up to the whole rest of the prompt for a
prefill, clipped by the budget left: that is chunked prefill, with decodes and prefills in one batch); then,
if nobody had to be preempted, to waiting requests in (priority, arrival) order while fewer than
``max_num_seqs`` run. A waiting request first takes whatever prefix of it the cache already holds.

When a running request cannot get the blocks it needs, the scheduler preempts by recompute: it frees the
blocks of the lowest-priority, latest-arrived request among those not yet scheduled this step (possibly the
request itself), resets its computed count to zero and puts it back in the waiting queue, ahead of every
later arrival. Since ``max_model_len`` never exceeds the cache, a request alone always fits: the head of the
queue always progresses, so there is no deadlock. The scheduler is pure bookkeeping (no torch, no clock of
its own); the engine core feeds it sampled tokens and tells it which requests finished.

With LoRA, a request runs only while its adapter holds one of the ``--max-loras`` slots (``LoRASlots``): a
waiting request whose adapter finds no slot (every slot's adapter has requests running) stays at the head of the
queue until a running request releases one, exactly as when the KV cache is full.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.request import Request, RequestStatus
from shoal.engine.core.request_queue import RequestQueue
from shoal.engine.lora.slots import LoRASlots


@dataclass
class SchedulerOutput:
    """One step's batch: requests in batch order and how many new tokens each computes."""

    scheduled: list[Request] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    preempted: list[Request] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # ids whose blocks were freed since the last batch

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Continuous batching with chunked prefill, prefix reuse and preemption by recompute."""

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        lora_slots: LoRASlots | None = None,
    ) -> None:
        self.block_manager = block_manager
        self.lora_slots = lora_slots
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.running: list[Request] = []
        self.waiting = RequestQueue()
        self.num_preemptions = 0
        self._released: list[str] = []  # finished or preempted since the last batch handed out

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)

    def add_request(self, request: Request) -> None:
        self.waiting.add(request)

    def finish_request(self, request: Request, status: RequestStatus) -> None:
        """Takes a request out of the queues (if still there) and frees its blocks at once."""
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
            self._release_lora(request)
        self.waiting.remove(request)
        self.block_manager.free(request)
        self._released.append(request.request_id)
        request.status = status

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        blocks = self.block_manager
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            while not blocks.allocate_slots(request, num_new):
                victim = max(self.running[i:], key=self.waiting.rank)
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is request:
                    break
            else:
                out.scheduled.append(request)
                out.num_scheduled_tokens[request.request_id] = num_new
                budget -= num_new
                i += 1
        if out.preempted:
            return self._hand_out(out)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting.peek()
            computed_blocks, num_cached = blocks.get_computed_blocks(request)
            num_new = min(request.num_tokens - num_cached, budget)
            if not self._acquire_lora(request):
                break
            if not blocks.allocate_slots(request, num_new, computed_blocks):
                self._release_lora(request)
                break
            blocks.record_prefix_query(request.num_tokens, num_cached)
            self.waiting.pop()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            out.scheduled.append(request)
            out.num_scheduled_tokens[request.request_id] = num_new
            budget -= num_new
        return self._hand_out(out)

    def update_from_output(self, output: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Advances computed counters and appends the sampled tokens; returns the requests that got one."""
        got_token: list[Request] = []
        for request in output.scheduled:
            request.num_computed_tokens += output.num_scheduled_tokens[request.request_id]
            token = sampled.get(request.request_id)
            if token is not None:
                request.append_token(token)
                got_token.append(request)
        return got_token

    def _hand_out(self, out: SchedulerOutput) -> SchedulerOutput:
        """A batch that runs carries the ids released since the last one (the runner drops their block-table rows);
        an empty batch never reaches the runner, so they wait for the next."""
        if out.scheduled:
            out.released, self._released = self._released, []
        return out

    def _acquire_lora(self, request: Request) -> bool:
        if request.lora_name is None:
            return True
        assert self.lora_slots is not None, "a request names an adapter, so LoRA is enabled"
        return self.lora_slots.acquire(request.lora_name) is not None

    def _release_lora(self, request: Request) -> None:
        if request.lora_name is not None and self.lora_slots is not None:
            self.lora_slots.release(request.lora_name)

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self._release_lora(request)
        self.block_manager.free(request)
        self._released.append(request.request_id)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        self.num_preemptions += 1
        self.waiting.prepend(request)
