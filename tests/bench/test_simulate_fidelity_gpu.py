"""The replay half of ``bench/simulate_fidelity_gpu.py``: a bench run's record becomes the trace the load
generator sent, and one simulated replica serves it as the profile says. The measuring half needs a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from shoal.loadgen.arrivals import arrival_gaps
from shoal.simulate.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import simulate_fidelity_gpu as fidelity


def _record(rate: float, prompts: list[int], output: int, seed: int = 7) -> dict:
    """What ``shoal bench serve --json`` writes (the command line keeps the rate as text: it may be inf)."""
    return {
        "config": {"request_rate": str(rate), "burstiness": 1.0, "seed": seed},
        "results": [{"success": True, "prompt_tokens": p, "output_tokens": output} for p in prompts],
    }


def test_the_trace_is_the_load_generators_schedule_with_the_engines_token_counts() -> None:
    prompts = [1000, 998, 1003, 1001, 999]
    trace = fidelity.run_trace(_record(4.0, prompts, 128))
    np.testing.assert_allclose(trace.arrival, np.cumsum(arrival_gaps(5, 4.0, 1.0, 7)))
    assert trace.prompt_tokens.tolist() == prompts and set(trace.output_tokens.tolist()) == {128}


def test_a_run_with_a_failed_request_is_not_replayed() -> None:
    record = _record(4.0, [1000, 1000], 16)
    record["results"][1] = {"success": False, "prompt_tokens": 0, "output_tokens": 0, "error": "ReadError: "}
    with pytest.raises(SystemExit, match="failed requests"):
        fidelity.run_trace(record)


def test_requests_far_apart_take_the_profiles_prefill_step_and_decode_steps() -> None:
    profile = load_profile("llama3-8b-h100")
    step, prompt = profile.step, 1000
    trace = fidelity.run_trace(_record(0.01, [prompt] * 4, 32))
    ttft, tpot = fidelity.simulated(trace, profile)
    prefill = step.base_s + step.per_prefill_token_s * prompt + step.per_prefill_attention_s * prompt**2
    np.testing.assert_allclose(ttft, prefill, rtol=1e-6)
    np.testing.assert_allclose(tpot, step.base_s + step.per_decode_seq_s, rtol=1e-6)
