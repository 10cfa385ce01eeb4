"""Small engine profiles and traces for the simulator tests, built in code."""

from __future__ import annotations

import numpy as np

from shoal.simulate.profile import EngineProfile, StepCost
from shoal.simulate.trace import Trace, make_trace


def small_profile(**overrides: object) -> EngineProfile:
    """A replica that runs 8 sequences, 512 tokens a step, 20 ms a step plus a little per token."""
    fields: dict[str, object] = dict(
        name="test",
        source="tests",
        max_num_batched_tokens=512,
        max_num_seqs=8,
        kv_capacity_tokens=16384,
        covered_batch_tokens=1024,
        covered_decode_seqs=16,
        step=StepCost(base_s=0.02, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3, per_context_token_s=1e-6),
        startup_s=(20.0, 40.0),
    )
    fields.update(overrides)
    return EngineProfile(**fields)  # type: ignore[arg-type]


def poisson_trace(rate: float, count: int, seed: int = 0, groups: int = 0) -> Trace:
    """``count`` Poisson arrivals of short requests; with ``groups``, half share one of that many 128-token prefixes."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, count))
    prompt = rng.integers(64, 320, count)
    output = rng.integers(8, 64, count)
    if not groups:
        return make_trace("poisson", arrival, prompt, output)
    group = np.where(rng.random(count) < 0.5, rng.integers(0, groups, count), -1)
    prefix = np.where(group >= 0, 128, 0)
    return make_trace("poisson", arrival, prompt + prefix, output, group, prefix)
