"""A step's inputs: one host-to-device copy, persistent block-table rows equal to a from-scratch build, and the
same device addresses for every decode step of one batch size."""

from __future__ import annotations

import itertools
from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.request import Request, RequestStatus
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.core.scheduler import Scheduler, SchedulerOutput
from shoal.engine.core.step_inputs import StepBatch, StepInputs
from shoal.kernels import AttentionMetadata

BLOCK = 4
MAX_MODEL_LEN = 64
_ids = itertools.count()


class _DataMovement(TorchDispatchMode):
    """Records every op that makes or moves tensor data from outside torch (a copy, a cast, a list or array
    turned into a tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        if "copy" in name or "lift_fresh" in name or ".to." in name or "index_put" in name:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def _engine_parts(num_blocks: int, sliding_window: int | None = None) -> tuple[Scheduler, StepInputs]:
    blocks = BlockManager(num_blocks, BLOCK, enable_prefix_caching=True, sliding_window=sliding_window)
    return Scheduler(blocks, max_num_batched_tokens=24, max_num_seqs=6), StepInputs(6, 24, MAX_MODEL_LEN, BLOCK, "cpu")


def _request(prompt: list[int]) -> Request:
    params = SamplingParams(max_tokens=MAX_MODEL_LEN)
    return Request(f"r{next(_ids)}", prompt, params, arrival_time=0.0, max_output_tokens=MAX_MODEL_LEN - len(prompt))


def _from_scratch(batch: SchedulerOutput) -> tuple[list[int], list[int], list[int], AttentionMetadata]:
    """The step's inputs as the runner built them before: nested lists, then ``AttentionMetadata.build``."""
    input_ids: list[int] = []
    positions: list[int] = []
    query_lens: list[int] = []
    seq_lens: list[int] = []
    tables: list[list[int]] = []
    logits_indices: list[int] = []
    for request in batch.scheduled:
        start = request.num_computed_tokens
        end = start + batch.num_scheduled_tokens[request.request_id]
        input_ids.extend(request.all_token_ids[start:end])
        positions.extend(range(start, end))
        query_lens.append(end - start)
        seq_lens.append(end)
        tables.append(request.block_ids)
        if end == request.num_tokens:
            logits_indices.append(len(input_ids) - 1)
    return input_ids, positions, logits_indices, AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK)


def _assert_equal_to_scratch(step: StepBatch, batch: SchedulerOutput) -> None:
    input_ids, positions, logits_indices, meta = _from_scratch(batch)
    assert step.input_ids.tolist() == input_ids
    assert step.positions.tolist() == positions
    assert step.logits_indices.tolist() == logits_indices
    assert step.meta.block_tables.tolist() == meta.block_tables.tolist()
    assert step.meta.slot_mapping.tolist() == meta.slot_mapping.tolist()
    assert step.meta.seq_lens.tolist() == meta.seq_lens.tolist()
    assert step.meta.query_start_loc.tolist() == meta.query_start_loc.tolist()
    assert (step.meta.max_query_len, step.meta.max_seq_len) == (meta.max_query_len, meta.max_seq_len)
    for got, want in ((step.input_ids, torch.int64), (step.meta.block_tables, torch.int32)):
        assert got.dtype == want
    assert [r.request_id for r in step.sampling] == [
        r.request_id
        for r in batch.scheduled
        if r.num_computed_tokens + batch.num_scheduled_tokens[r.request_id] == r.num_tokens
    ]


def _finish_step(scheduler: Scheduler, batch: SchedulerOutput, step: StepBatch, token: int) -> None:
    scheduler.update_from_output(batch, {r.request_id: token for r in step.sampling})


def test_a_step_copies_its_metadata_to_the_device_once() -> None:
    scheduler, inputs = _engine_parts(num_blocks=64)
    for prompt in ([1, 2, 3, 4, 5, 6], [7, 8, 9], [3] * 11):
        scheduler.add_request(_request(prompt))
    for step_number in range(3):  # a prefill step, then decodes
        batch = scheduler.schedule()
        with _DataMovement() as moved:
            step = inputs.prepare(batch)
        assert moved.ops == ["aten.copy_.default"], f"step {step_number}"
        arena = inputs.device_buffer
        start, end = arena.data_ptr(), arena.data_ptr() + arena.numel() * arena.element_size()
        fields = (step.input_ids, step.positions, step.logits_indices, *_meta_tensors(step.meta))
        assert all(start <= t.data_ptr() < end for t in fields if t.numel()), "every field is a view of the copy"
        _finish_step(scheduler, batch, step, token=5)


def _meta_tensors(meta: AttentionMetadata) -> tuple[torch.Tensor, ...]:
    return meta.query_start_loc, meta.seq_lens, meta.block_tables, meta.slot_mapping


def test_decode_steps_of_one_batch_size_read_the_same_device_addresses() -> None:
    scheduler, inputs = _engine_parts(num_blocks=64)
    for prompt in ([1, 2, 3], [4, 5, 6, 7, 8]):
        scheduler.add_request(_request(prompt))
    batch = scheduler.schedule()
    _finish_step(scheduler, batch, inputs.prepare(batch), token=9)
    addresses = []
    for _ in range(BLOCK + 1):  # crosses a block boundary: the table widens, the other fields stay put
        batch = scheduler.schedule()
        step = inputs.prepare(batch)
        addresses.append([t.data_ptr() for t in (step.input_ids, step.positions, step.logits_indices)])
        addresses[-1] += [t.data_ptr() for t in _meta_tensors(step.meta)]
        _finish_step(scheduler, batch, step, token=9)
    assert all(a == addresses[0] for a in addresses)


# Random events between steps: ("admit", prompt length, shared prefix?), ("finish", index of a running request),
# ("abort_waiting",) the head of the queue, or ("step",); a small cache makes the scheduler preempt.
_EVENT = st.one_of(
    st.tuples(st.just("admit"), st.integers(1, 20), st.booleans()),
    st.tuples(st.just("finish"), st.integers(0, 7)),
    st.tuples(st.just("abort_waiting")),
    st.tuples(st.just("step")),
)


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(_EVENT, min_size=1, max_size=60),
    num_blocks=st.integers(16, 40),
    sliding_window=st.sampled_from([None, 5]),
)
def test_block_table_rows_kept_between_steps_equal_a_build_from_scratch(
    events: list[tuple[Any, ...]], num_blocks: int, sliding_window: int | None
) -> None:
    scheduler, inputs = _engine_parts(num_blocks, sliding_window)
    shared = [11, 12, 13, 14, 15, 16, 17, 18]
    token = itertools.count(100)
    for event in [*events, ("step",), ("step",)]:
        if event[0] == "admit":
            _, length, share = event
            prompt = (shared if share else [])[:length] + [next(token) % 50 for _ in range(length)]
            scheduler.add_request(_request(prompt[:length]))
        elif event[0] == "finish" and scheduler.running:
            request = scheduler.running[event[1] % len(scheduler.running)]
            scheduler.finish_request(request, RequestStatus.FINISHED_STOPPED)
        elif event[0] == "abort_waiting" and scheduler.waiting:
            scheduler.finish_request(scheduler.waiting.peek(), RequestStatus.FINISHED_ABORTED)
        elif event[0] == "step":
            batch = scheduler.schedule()
            if batch.is_empty:
                continue
            step = inputs.prepare(batch)
            _assert_equal_to_scratch(step, batch)
            assert len(inputs.block_table) <= scheduler.num_running, "a finished or preempted request keeps no row"
            _finish_step(scheduler, batch, step, next(token) % 50)
            for request in step.sampling:
                if request.num_tokens >= MAX_MODEL_LEN:
                    scheduler.finish_request(request, RequestStatus.FINISHED_LENGTH)


def test_a_step_of_the_last_steps_shape_gathers_its_block_table_again_when_a_row_changed() -> None:
    """A step of the previous step's shape, with the same rows and none written since, reuses the gathered block
    tables; a row freed and taken again by another request (same shape, same row) is gathered anew."""
    scheduler, inputs = _engine_parts(num_blocks=64)
    first = _request([1])
    scheduler.add_request(first)
    batch = scheduler.schedule()
    _finish_step(scheduler, batch, inputs.prepare(batch), token=2)
    first_blocks = list(first.block_ids)
    scheduler.finish_request(first, RequestStatus.FINISHED_STOPPED)
    second = _request([3])  # one prompt token: its prefill has a decode's shape, and it takes the freed row
    scheduler.add_request(second)
    for _ in range(2):  # a new row, then the same rows unwritten
        batch = scheduler.schedule()
        step = inputs.prepare(batch)
        _assert_equal_to_scratch(step, batch)
        _finish_step(scheduler, batch, step, token=4)
    assert second.block_ids != first_blocks, "the row's new entries differ from the old"
