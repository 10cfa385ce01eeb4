"""The per-step thread policy: every CPU for small decode steps only while measured faster, probes that back off."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.engine import LLM, SamplingParams
from shoal.engine.core.step_threads import MAX_PROBE_INTERVAL, PROBE_INTERVAL, PROBE_STEPS, StepThreads


class TimedSteps(StepThreads):
    """The policy, unchanged, remembering each small step's thread count and time as the runner reports them, and
    the count torch had when the runner reported it."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.timed: list[tuple[int, float]] = []
        self.applied: list[tuple[int, int]] = []

    def observe(self, threads: int, rows: int, decode_only: bool, seconds: float) -> None:
        if self.is_small(rows, decode_only):
            self.timed.append((threads, seconds))
            self.applied.append((threads, torch.get_num_threads()))
        super().observe(threads, rows, decode_only, seconds)


def run(policy: StepThreads, steps: int, seconds: dict[int, float], rows: int = 1) -> list[int]:
    """Feeds ``steps`` decode steps whose time depends only on the thread count; returns the counts used."""
    used = []
    for _ in range(steps):
        threads = policy.threads_for(rows, decode_only=True)
        policy.observe(threads, rows, True, seconds[threads])
        used.append(threads)
    return used


def test_an_idle_machine_moves_small_steps_to_every_cpu_within_the_first_probe() -> None:
    policy = StepThreads(cores=2)
    used = run(policy, PROBE_INTERVAL + PROBE_STEPS + 200, {1: 0.022, 2: 0.016})
    assert used[0] == 1  # starts leaving the event loop its CPU
    assert policy.choice == 2
    after_switch = used[PROBE_INTERVAL + PROBE_STEPS :]
    assert after_switch.count(2) / len(after_switch) > 0.9  # the later probes of one thread are rare


def test_a_loaded_machine_stays_on_one_fewer_and_probes_ever_more_rarely() -> None:
    policy = StepThreads(cores=2)
    used = run(policy, 20_000, {1: 0.03, 2: 0.3})  # a neighbour holds the second CPU
    assert policy.choice == 1
    probe_steps = used.count(2)
    assert probe_steps <= PROBE_STEPS * 12  # doubling intervals: ~log2(20,000 / 8) probes, not 20,000 / 8
    assert used[-MAX_PROBE_INTERVAL:].count(2) <= PROBE_STEPS  # at most one probe in the longest interval


def test_a_machine_that_becomes_idle_is_noticed_at_the_next_probe() -> None:
    policy = StepThreads(cores=2, max_probe_interval=256)
    run(policy, 3_000, {1: 0.03, 2: 0.3})
    assert policy.choice == 1
    run(policy, 600, {1: 0.03, 2: 0.015})  # the stale 0.3 s of the loaded probes must not hold it back
    assert policy.choice == 2


def test_large_steps_and_prefill_leave_the_event_loop_a_cpu_and_teach_nothing() -> None:
    policy = StepThreads(cores=4)
    run(policy, PROBE_INTERVAL + PROBE_STEPS, {3: 0.05, 4: 0.02})
    assert policy.choice == 4
    before = dict(policy.seconds)
    assert policy.threads_for(64, decode_only=True) == 3
    assert policy.threads_for(1, decode_only=False) == 3
    policy.observe(3, 64, True, 9.0)
    policy.observe(3, 1, False, 9.0)
    assert policy.seconds == before


def test_one_cpu_cannot_adapt() -> None:
    with pytest.raises(ValueError, match="at least 2 CPUs"):
        StepThreads(cores=1)


@settings(max_examples=60, deadline=None)
@given(
    cores=st.integers(2, 64),
    steps=st.lists(
        st.tuples(st.integers(1, 80), st.booleans(), st.floats(1e-4, 5.0, allow_nan=False)), min_size=1, max_size=300
    ),
)
def test_the_answer_is_always_all_cpus_or_one_fewer_and_never_all_for_big_steps(
    cores: int, steps: list[tuple[int, bool, float]]
) -> None:
    policy = StepThreads(cores)
    for rows, decode_only, seconds in steps:
        threads = policy.threads_for(rows, decode_only)
        assert threads in (cores, cores - 1)
        if rows > policy.small_rows or not decode_only:
            assert threads == cores - 1
        policy.observe(threads, rows, decode_only, seconds)


@settings(max_examples=40, deadline=None)
@given(fast=st.floats(1e-3, 1.0), ratio=st.floats(1.2, 20.0), faster=st.sampled_from([1, 2]))
def test_steady_times_settle_on_the_faster_count(fast: float, ratio: float, faster: int) -> None:
    policy = StepThreads(cores=2)
    times = {faster: fast, 3 - faster: fast * ratio}
    run(policy, 2_000, times)
    assert policy.choice == faster


def test_the_model_runner_applies_the_policy_and_times_both_counts(tiny_llama_dir: Path) -> None:
    """A real engine: small decode steps alternate between the counts as probed, the tokens are unchanged."""
    llm = LLM(str(tiny_llama_dir), dtype="float32", num_kv_blocks=64)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = llm.generate([[5, 9, 40, 7, 100]], params)[0].token_ids
    policy = TimedSteps(cores=2, probe_interval=2, probe_steps=3)
    llm.engine.runner.step_threads = policy  # the engine's runner is a ModelRunner
    before = torch.get_num_threads()
    try:
        assert llm.generate([[5, 9, 40, 7, 100]], params)[0].token_ids == plain
        # both counts ran small steps and were timed (what the policy keeps at the end depends on which count the
        # machine made faster: a probe drops the other count's old average)
        assert {threads for threads, seconds in policy.timed if seconds > 0} == {1, 2}
        assert all(torch_threads == threads for threads, torch_threads in policy.applied)
    finally:
        torch.set_num_threads(before)
