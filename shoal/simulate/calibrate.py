"""An engine profile fitted from ``shoal bench serve --json`` runs of a real engine, in engine seconds.

Each calibration run sends exactly ``concurrency`` identical-shape requests at once (``ignore_eos``, so every
request has exactly its output length): the engine prefills them together in ``ceil(c * prompt / budget)``
steps, then runs ``output - 1`` decode steps of ``c`` sequences whose context grows by one token a step. The
run's total is therefore linear in the five step-time coefficients of :mod:`shoal.simulate.profile`::

    engine_s = base_s * steps + per_prefill_token_s * c * prompt + per_decode_seq_s * c * (output - 1)
            + per_context_token_s * c * ((output - 1) * prompt + (output - 1) * output / 2)
            + per_prefill_attention_s * c * prompt ** 2

The measured side is ``engine_s``, which ``bench/simulate_calibrate.py`` adds to the bench record: on a CPU
engine the CPU time its process used during the run, not wall time (on a shared machine wall time measures the
neighbours, CPU time the engine: one torch thread, so CPU seconds are the seconds it would take alone); on a GPU
engine the run's wall time, since the GPU is the engine's alone and its work does not show as CPU time. The
coefficients are the non-negative least-squares fit minimizing relative error, found by dropping a
negative coefficient and refitting. The profile covers the largest batch measured, and nothing beyond.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from shoal.simulate.profile import EngineProfile, ProfileError, StepCost

Features = tuple[float, float, float, float, float]


def observation(record: Mapping[str, object], budget: int) -> tuple[Features, float]:
    """``((steps, prefill tokens, decode sequence-steps, context token-steps, prefill pairs), engine s)``."""
    config, results, seconds = record.get("config"), record.get("results"), record.get("engine_s")
    if not isinstance(config, Mapping) or not isinstance(results, list) or not isinstance(seconds, (int, float)):
        raise ProfileError(
            "a calibration record needs 'config', 'results' and 'engine_s' (bench/simulate_calibrate.py writes them)"
        )
    concurrency = int(config.get("concurrency") or 0)
    ok = [r for r in results if r.get("success")]
    if len(ok) != concurrency or concurrency < 1:
        raise ProfileError(
            f"a calibration run sends exactly --concurrency requests at once and all succeed; got "
            f"{len(ok)} successful of {len(results)} at concurrency {concurrency}"
        )
    prompt = float(np.mean([r["prompt_tokens"] for r in ok]))
    output = float(np.mean([r["output_tokens"] for r in ok]))
    decode = output - 1
    steps = math.ceil(concurrency * prompt / budget) + decode
    context = concurrency * (decode * prompt + decode * output / 2)
    return (steps, concurrency * prompt, concurrency * decode, context, concurrency * prompt**2), float(seconds)


def fit_step_cost(rows: Iterable[tuple[Features, float]]) -> StepCost:
    """Non-negative least squares on relative error (see the module docstring)."""
    rows = list(rows)
    x = np.asarray([features for features, _ in rows], dtype=float)
    y = np.asarray([seconds for _, seconds in rows], dtype=float)
    if len(rows) < 5 or (y <= 0).any():
        raise ProfileError(f"need at least 5 runs with positive engine time to fit 5 coefficients, got {len(rows)}")
    weights = 1.0 / y
    active = list(range(5))
    while True:
        coef, *_ = np.linalg.lstsq(x[:, active] * weights[:, None], y * weights, rcond=None)
        if (coef >= 0).all():
            break
        del active[int(np.argmin(coef))]
    full = np.zeros(5)
    full[active] = coef
    return StepCost(*map(float, full))


def profile_from_bench(
    records: Iterable[Mapping[str, object]],
    name: str,
    source: str,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    kv_capacity_tokens: int,
    startup_s: tuple[float, float],
) -> EngineProfile:
    """A profile for the engine configuration the calibration runs were measured with."""
    records = list(records)
    rows = [observation(record, max_num_batched_tokens) for record in records]
    largest_prefill = max(min(features[1], max_num_batched_tokens) for features, _ in rows)
    largest_batch = max(int(record["config"]["concurrency"]) for record in records)  # type: ignore[index]
    return EngineProfile(
        name=name,
        source=source,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        kv_capacity_tokens=kv_capacity_tokens,
        covered_batch_tokens=int(largest_prefill),
        covered_decode_seqs=largest_batch,
        step=fit_step_cost(rows),
        startup_s=startup_s,
    )
