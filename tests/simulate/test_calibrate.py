"""Calibration recovers the step-time coefficients that produced the runs, and refuses runs it cannot use."""

from __future__ import annotations

import pytest

from shoal.simulate.calibrate import observation, profile_from_bench
from shoal.simulate.profile import ProfileError, StepCost

TRUE = StepCost(
    base_s=0.03, per_prefill_token_s=3e-4, per_decode_seq_s=5e-3, per_context_token_s=1e-6, per_prefill_attention_s=2e-6
)
BUDGET = 2048


def _record(concurrency: int, prompt: int, output: int, engine_s: float | None = None) -> dict:
    record = {
        "config": {"concurrency": concurrency},
        "results": [{"success": True, "prompt_tokens": prompt, "output_tokens": output}] * concurrency,
    }
    if engine_s is None:
        features, _ = observation({**record, "engine_s": 1.0}, BUDGET)
        steps, prefill, seq_steps, context, pairs = features
        engine_s = (
            TRUE.base_s * steps
            + TRUE.per_prefill_token_s * prefill
            + TRUE.per_decode_seq_s * seq_steps
            + TRUE.per_context_token_s * context
            + TRUE.per_prefill_attention_s * pairs
        )
    return {**record, "engine_s": engine_s}


def test_a_fit_of_exact_runs_recovers_the_coefficients() -> None:
    runs = [(1, 100, 24), (1, 600, 4), (1, 1900, 4), (4, 600, 16), (8, 200, 16), (16, 100, 24)]
    profile = profile_from_bench([_record(*run) for run in runs], "fit", "tests", BUDGET, 16, 20000, (9.0, 9.0))
    for name in ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s", "per_prefill_attention_s"):
        assert getattr(profile.step, name) == pytest.approx(getattr(TRUE, name), rel=1e-3), name
    assert profile.covered_decode_seqs == 16 and profile.covered_batch_tokens == BUDGET


def test_a_run_with_a_failed_request_or_too_few_runs_is_refused() -> None:
    broken = _record(4, 100, 8)
    broken["results"] = broken["results"][:3]
    with pytest.raises(ProfileError, match="exactly --concurrency requests at once"):
        observation(broken, BUDGET)
    with pytest.raises(ProfileError, match="at least 5 runs"):
        profile_from_bench([_record(1, 100, 8)] * 3, "fit", "tests", BUDGET, 1, 1000, (1.0, 1.0))
    with pytest.raises(ProfileError, match="engine_s"):
        observation({"config": {"concurrency": 1}, "results": []}, BUDGET)
