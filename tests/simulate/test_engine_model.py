"""The engine model against hand-computed timings: one request alone, one arriving mid-segment, a prefix hit."""

from __future__ import annotations

import pytest
from sim_fixtures import small_profile

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import RoundRobin
from shoal.simulate.profile import EngineProfile, StepCost
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import make_trace


def _decode_time(profile: EngineProfile, steps: int, seqs: int, context: int) -> float:
    """``steps`` decode steps of ``seqs`` sequences starting from ``context`` tokens, stepped one by one."""
    total = 0.0
    for _ in range(steps):
        total += profile.step.seconds(0, seqs, context)
        context += seqs
    return total


def test_a_lone_request_takes_one_prefill_step_then_one_decode_step_per_token(profile: EngineProfile) -> None:
    trace = make_trace("one", [1.0], [300], [10])
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(initial_replicas=1))
    prefill = profile.step.seconds(300, 0, 0)
    assert run.first_token[0] == pytest.approx(1.0 + prefill)
    assert run.finish[0] == pytest.approx(1.0 + prefill + _decode_time(profile, 9, 1, 300))


def test_a_long_prompt_is_prefilled_in_chunks_of_the_token_budget() -> None:
    profile = small_profile(step=StepCost(0.02, 1e-4, 1e-3, 1e-6, per_prefill_attention_s=1e-8))
    trace = make_trace("long", [0.0], [1200], [2])
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(initial_replicas=1))
    # Each chunk attends to what came before it and to itself: chunk x (computed + chunk) pairs.
    chunks = [
        profile.step.seconds(512, 0, 0, 512 * 512),
        profile.step.seconds(512, 0, 512, 512 * 1024),
        profile.step.seconds(176, 0, 1024, 176 * 1200),
    ]
    assert run.first_token[0] == pytest.approx(sum(chunks))


def test_a_request_arriving_mid_segment_joins_at_the_next_step_boundary(profile: EngineProfile) -> None:
    trace = make_trace("two", [0.0, 0.5], [100, 100], [200, 5])
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(initial_replicas=1))
    start = profile.step.seconds(100, 0, 0)
    # Walk the first request's decode steps to the one in progress at 0.5 s.
    t, context = start, 100
    while t <= 0.5:
        t += profile.step.seconds(0, 1, context)
        context += 1
    joined = t + profile.step.seconds(100, 1, context)
    assert run.first_token[1] == pytest.approx(joined)
    assert run.first_token[1] - 0.5 < 2 * profile.step.seconds(100, 1, context)


def test_a_shared_prefix_held_by_the_replica_is_not_prefilled_again(profile: EngineProfile) -> None:
    trace = make_trace("prefix", [0.0, 5.0], [400, 400], [4, 4], [7, 7], [256, 256])
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(initial_replicas=1))
    assert run.first_token[0] - 0.0 == pytest.approx(profile.step.seconds(400, 0, 0))
    assert run.first_token[1] - 5.0 == pytest.approx(profile.step.seconds(400 - 256, 0, 256))
    assert run.prefill_tokens_saved == 256


def test_the_batch_never_exceeds_max_num_seqs(profile: EngineProfile) -> None:
    count = 3 * profile.max_num_seqs
    trace = make_trace("burst", [0.0] * count, [50] * count, [20] * count)
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(initial_replicas=1))
    decoding_at = [int(((run.first_token <= t) & (run.finish > t)).sum()) for t in run.first_token]
    assert max(decoding_at) == profile.max_num_seqs
    assert run.in_flight == 0
