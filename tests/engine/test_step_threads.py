"""The per-step thread policy: every CPU only while measured faster, per kind of step, with probes that back off."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.devices import TEST_DEVICE

from shoal.engine import LLM, SamplingParams
from shoal.engine.core.step_threads import MAX_PROBE_INTERVAL, PROBE_INTERVAL, PROBE_STEPS, StepThreads


class TimedSteps(StepThreads):
    """The policy, unchanged, remembering each step's kind, thread count and time as the runner reports them, and
    the count torch had when the runner reported it."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.timed: list[tuple[bool, int, float]] = []
        self.applied: list[tuple[int, int]] = []

    def observe(self, threads: int, rows: int, tokens: int, seconds: float) -> None:
        self.timed.append((self.is_small(rows, tokens), threads, seconds))
        self.applied.append((threads, torch.get_num_threads()))
        super().observe(threads, rows, tokens, seconds)


def run(
    policy: StepThreads, steps: int, seconds: dict[int, float], rows: int = 1, tokens: int | None = None
) -> list[int]:
    """Feeds ``steps`` steps of ``rows`` sequences and ``tokens`` tokens (a decode: one each) whose time depends
    only on the thread count; returns the counts used."""
    tokens = rows if tokens is None else tokens
    used = []
    for _ in range(steps):
        threads = policy.threads_for(rows, tokens)
        policy.observe(threads, rows, tokens, seconds[threads])
        used.append(threads)
    return used


def test_an_idle_machine_moves_small_steps_to_every_cpu_within_the_first_probe() -> None:
    policy = StepThreads(cores=2)
    used = run(policy, PROBE_INTERVAL + PROBE_STEPS + 200, {1: 0.022, 2: 0.016})
    assert used[0] == 1  # starts leaving the event loop its CPU
    assert policy.small.choice == 2
    after_switch = used[PROBE_INTERVAL + PROBE_STEPS :]
    assert after_switch.count(2) / len(after_switch) > 0.9  # the later probes of one thread are rare


def test_a_loaded_machine_stays_on_one_fewer_and_probes_ever_more_rarely() -> None:
    policy = StepThreads(cores=2)
    used = run(policy, 20_000, {1: 0.03, 2: 0.3})  # a neighbour holds the second CPU
    assert policy.small.choice == 1
    probe_steps = used.count(2)
    assert probe_steps <= PROBE_STEPS * 12  # doubling intervals: ~log2(20,000 / 8) probes, not 20,000 / 8
    assert used[-MAX_PROBE_INTERVAL:].count(2) <= PROBE_STEPS  # at most one probe in the longest interval


def test_a_machine_that_becomes_idle_is_noticed_at_the_next_probe() -> None:
    policy = StepThreads(cores=2, max_probe_interval=256)
    run(policy, 3_000, {1: 0.03, 2: 0.3})
    assert policy.small.choice == 1
    run(policy, 600, {1: 0.03, 2: 0.015})  # the stale 0.3 s of the loaded probes must not hold it back
    assert policy.small.choice == 2


def test_large_steps_and_prefill_learn_apart_from_small_ones_by_their_time_per_token() -> None:
    """Many streams on an idle machine: every CPU wins for them while a neighbour-free small step would not (the
    two kinds are timed apart), and a large step's time counts per token, so steps of different sizes compare."""
    policy = StepThreads(cores=4)
    run(policy, PROBE_INTERVAL + PROBE_STEPS, {3: 0.02, 4: 0.05})  # small steps: one fewer stays faster
    assert policy.small.choice == 3
    small_seconds = dict(policy.small.seconds)
    for i in range(PROBE_INTERVAL + PROBE_STEPS + 4):
        rows = 48 + i % 17  # varying sizes: 0.4 ms a token on 4 threads, 0.7 on 3
        tokens = rows if i % 3 else rows + 512  # some carry a prefill chunk
        threads = policy.threads_for(rows, tokens)
        policy.observe(threads, rows, tokens, tokens * {3: 7e-4, 4: 4e-4}[threads])
    assert policy.large.choice == 4
    assert policy.threads_for(64, 64) == 4 and policy.threads_for(2, 300) == 4  # prefill is a large step
    assert policy.threads_for(1, 1) == 3
    assert policy.small.seconds == small_seconds  # large steps taught the small kind nothing


def test_a_loaded_machine_keeps_large_steps_on_one_fewer() -> None:
    policy = StepThreads(cores=2)
    used = run(policy, 5_000, {1: 0.08, 2: 0.9}, rows=64)
    assert policy.large.choice == 1 and used.count(2) <= PROBE_STEPS * 11


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
def test_the_answer_is_always_all_cpus_or_one_fewer(cores: int, steps: list[tuple[int, bool, float]]) -> None:
    policy = StepThreads(cores)
    for rows, decode_only, seconds in steps:
        tokens = rows if decode_only else rows + 100
        threads = policy.threads_for(rows, tokens)
        assert threads in (cores, cores - 1)
        assert threads == policy.kind(rows, tokens).answer()
        policy.observe(threads, rows, tokens, seconds)


@settings(max_examples=40, deadline=None)
@given(
    fast=st.floats(1e-3, 1.0), ratio=st.floats(1.2, 20.0), faster=st.sampled_from([1, 2]), rows=st.sampled_from([1, 64])
)
def test_steady_times_settle_on_the_faster_count(fast: float, ratio: float, faster: int, rows: int) -> None:
    policy = StepThreads(cores=2)
    times = {faster: fast, 3 - faster: fast * ratio}
    run(policy, 2_000, times, rows=rows)
    assert policy.kind(rows, rows).choice == faster


def test_the_model_runner_applies_the_policy_and_times_both_counts(tiny_llama_dir: Path) -> None:
    """A real engine: steps alternate between the counts as probed, the tokens are unchanged."""
    llm = LLM(str(tiny_llama_dir), dtype="float32", num_kv_blocks=64, device=TEST_DEVICE)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = llm.generate([[5, 9, 40, 7, 100]], params)[0].token_ids
    policy = TimedSteps(cores=2, probe_interval=2, probe_steps=3)
    llm.engine.runner.step_threads = policy  # the engine's runner is a ModelRunner
    before = torch.get_num_threads()
    try:
        assert llm.generate([[5, 9, 40, 7, 100]], params)[0].token_ids == plain
        # both counts ran small steps and were timed (what the policy keeps at the end depends on which count the
        # machine made faster: a probe drops the other count's old average)
        assert {threads for small, threads, seconds in policy.timed if small and seconds > 0} == {1, 2}
        assert all(torch_threads == threads for threads, torch_threads in policy.applied)
    finally:
        torch.set_num_threads(before)
