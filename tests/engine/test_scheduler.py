"""The scheduler's promises under random arrivals, aborts and budgets, with a stand-in for the model.

The scheduler is pure bookkeeping: these tests drive it exactly as the engine core does (schedule, then
``update_from_output`` with one token per request whose chunk reached its end), with fixed tokens instead
of a model, and check its invariants at every step.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kv_invariants import assert_all_free, assert_consistent

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.request import Request, RequestStatus
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.core.scheduler import Scheduler, SchedulerOutput


def _check_step(scheduler: Scheduler, out: SchedulerOutput) -> None:
    bm = scheduler.block_manager
    assert out.total_num_scheduled_tokens <= scheduler.max_num_batched_tokens
    assert scheduler.num_running <= scheduler.max_num_seqs
    assert len({r.request_id for r in out.scheduled}) == len(out.scheduled)
    for request in out.scheduled:
        n = out.num_scheduled_tokens[request.request_id]
        assert n >= 1 and request.num_computed_tokens + n <= request.num_tokens
        assert len(request.block_ids) * bm.block_size >= request.num_computed_tokens + n
        assert request.status == RequestStatus.RUNNING
    for request in out.preempted:
        assert request.status == RequestStatus.PREEMPTED and request.block_ids == []


def _run_step(scheduler: Scheduler) -> tuple[SchedulerOutput, list[Request]]:
    """One engine step with a fake model: every request reaching its end gets token 7 and maybe finishes."""
    out = scheduler.schedule()
    _check_step(scheduler, out)
    sampled = {
        r.request_id: 7
        for r in out.scheduled
        if r.num_computed_tokens + out.num_scheduled_tokens[r.request_id] == r.num_tokens
    }
    finished = []
    for request in scheduler.update_from_output(out, sampled):
        if request.num_output_tokens >= request.max_output_tokens:
            scheduler.finish_request(request, RequestStatus.FINISHED_LENGTH)
            finished.append(request)
    return out, finished


def _request(i: int, prompt_len: int, max_tokens: int, priority: int = 0, shared: bool = True) -> Request:
    prompt = [(j % 5) if shared else (i * 1000 + j) for j in range(prompt_len)]
    return Request(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens), arrival_time=float(i), priority=priority)


_arrivals = st.lists(
    st.tuples(
        st.integers(0, 6),  # step of arrival
        st.integers(1, 30),  # prompt length
        st.integers(1, 12),  # max tokens
        st.integers(0, 2),  # priority
        st.booleans(),  # shares a prefix with the others
        st.one_of(st.none(), st.integers(0, 20)),  # step of abort, if any
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(
    arrivals=_arrivals,
    block_size=st.integers(1, 8),
    spare_blocks=st.integers(0, 12),
    budget=st.integers(1, 48),
    max_num_seqs=st.integers(1, 6),
)
def test_random_workloads_finish_within_budgets_and_leak_nothing(
    arrivals: list, block_size: int, spare_blocks: int, budget: int, max_num_seqs: int
) -> None:
    # The engine caps max_model_len by the cache, so the largest request alone always fits.
    longest = max(p + m for _, p, m, *_ in arrivals)
    bm = BlockManager(-(-longest // block_size) + spare_blocks, block_size)
    scheduler = Scheduler(bm, budget, max_num_seqs)
    pending = sorted(enumerate(arrivals), key=lambda item: item[1][0])
    live: dict[str, Request] = {}
    done: set[str] = set()
    step = 0
    while pending or scheduler.has_unfinished():
        while pending and pending[0][1][0] <= step:
            i, (_, prompt_len, max_tokens, priority, shared, _) = pending.pop(0)
            request = _request(i, prompt_len, max_tokens, priority, shared)
            scheduler.add_request(request)
            live[request.request_id] = request
        for i, (_, _, _, _, _, abort_at) in enumerate(arrivals):
            request = live.get(f"r{i}")
            if request is not None and abort_at == step:
                scheduler.finish_request(request, RequestStatus.FINISHED_ABORTED)
                del live[request.request_id]
                done.add(request.request_id)
        was_busy = scheduler.has_unfinished()
        out, finished = _run_step(scheduler)
        if was_busy:
            assert not out.is_empty or out.preempted, "no progress while requests wait"
        for request in finished:
            del live[request.request_id]
            done.add(request.request_id)
        assert_consistent(bm, live.values())
        step += 1
        assert step < 2000, "the workload did not finish"
    assert done == {f"r{i}" for i in range(len(arrivals))}
    assert_all_free(bm)


def test_chunked_prefill_runs_beside_decodes() -> None:
    bm = BlockManager(64, 4)
    scheduler = Scheduler(bm, max_num_batched_tokens=8, max_num_seqs=8)
    scheduler.add_request(_request(0, 3, 5, shared=False))
    _run_step(scheduler)  # r0 prefilled, now decoding
    scheduler.add_request(_request(1, 20, 1, shared=False))
    out, _ = _run_step(scheduler)
    assert out.num_scheduled_tokens == {"r0": 1, "r1": 7}  # the long prompt is chunked next to the decode
    out, _ = _run_step(scheduler)
    assert out.num_scheduled_tokens == {"r0": 1, "r1": 7}


def test_preemption_requeues_the_latest_request_at_the_front() -> None:
    bm = BlockManager(4, 4)  # 16 slots
    scheduler = Scheduler(bm, max_num_batched_tokens=64, max_num_seqs=8)
    for i in range(2):
        scheduler.add_request(_request(i, 7, 6, shared=False))
    scheduler.add_request(_request(2, 1, 1, shared=False))
    preempted: list[str] = []
    admitted_after: list[str] = []  # batch order of requests scheduled after the first preemption
    while scheduler.has_unfinished():
        out, _ = _run_step(scheduler)
        if preempted:
            admitted_after += [r.request_id for r in out.scheduled if r.request_id not in admitted_after]
        preempted += [r.request_id for r in out.preempted]
    assert preempted and preempted[0] == "r1" and scheduler.num_preemptions == len(preempted)
    assert admitted_after.index("r1") < admitted_after.index("r2")  # back at the front, before later arrivals
    assert_all_free(bm)


def test_priority_admits_lower_values_first() -> None:
    bm = BlockManager(64, 4)
    scheduler = Scheduler(bm, max_num_batched_tokens=64, max_num_seqs=1)
    scheduler.add_request(_request(0, 4, 1, priority=1, shared=False))
    scheduler.add_request(_request(1, 4, 1, priority=0, shared=False))
    out, _ = _run_step(scheduler)
    assert [r.request_id for r in out.scheduled] == ["r1"]
