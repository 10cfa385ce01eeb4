"""How long ``shoal up`` lets a draining engine run: the operator's termination law, sized when the drain begins.

A pod's grace is fixed in its template, from the device's default time per output token, because a grace taken
from the observed one would roll every engine (``shoal.operator.termination``). Local processes have no template:
the fleet sizes each drain from the time per output token observed by then (its P90), with the CPU's default as a
floor (a P90 read at light load is faster than a full batch's step), so a slower machine than the default assumes
loses no request on scale-in. Engines run on the CPU here whatever the spec's GPUs, so the CPU's default applies.
``spec.engine.terminationGracePeriodSeconds`` still wins, and is checked against the observed time as the
``DrainFits`` condition checks it on a cluster.
"""

from __future__ import annotations

from shoal.local.fleet import DrainGrace
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.termination import (
    DEFAULT_TPOT_SECONDS,
    DRAIN_MARGIN,
    EXIT_SECONDS,
    GRACE_CAP_SECONDS,
    PRESTOP_SLEEP_SECONDS,
    drain_verdict,
    termination,
)

CPU_TPOT_S = DEFAULT_TPOT_SECONDS["cpu"]


def engine_drain_s(spec: InferenceDeploymentSpec) -> int:
    """The Shoal engine's own ``--shutdown-grace`` here: the spec's override's drain, else the cap's, so the engine
    never aborts before the fleet ends its grace (:func:`drain_grace` sizes that)."""
    return termination(None, None, 0, spec.engine.termination_grace_period_seconds).drain_s


def drain_grace(spec: InferenceDeploymentSpec, tpot_s: float | None) -> DrainGrace:
    """The grace of a drain that begins now, at the observed ``tpot_s`` (None: none observed yet)."""
    max_model_len, explicit = spec.engine.max_model_len, spec.engine.termination_grace_period_seconds
    if explicit is not None:
        fits, _, message = drain_verdict(max_model_len, tpot_s, 0, explicit)
        return DrainGrace(float(explicit), "spec.engine.terminationGracePeriodSeconds", None if fits else message)
    if max_model_len is None:
        return DrainGrace(float(GRACE_CAP_SECONDS), f"the {GRACE_CAP_SECONDS} s cap: spec.engine.maxModelLen is unset")
    tpot = max(tpot_s or 0.0, CPU_TPOT_S)
    observed = tpot > CPU_TPOT_S
    grace = termination(max_model_len, tpot, 0, None).grace_s
    basis = "the observed" if observed else "the CPU's default"
    why = f"a {max_model_len}-token request at {basis} {tpot:.3g} s a token"
    if tpot_s is not None and not observed:
        why += f" (observed {tpot_s:.3g} s, P90)"
    streams_s = max_model_len * tpot * DRAIN_MARGIN
    warning = None
    if PRESTOP_SLEEP_SECONDS + streams_s + EXIT_SECONDS > GRACE_CAP_SECONDS:
        warning = (
            f"a {max_model_len}-token request streams for up to {streams_s:.0f} s at {tpot:.3g} s a token, past"
            f" the {GRACE_CAP_SECONDS} s cap: a scale-in can cut it; lower spec.engine.maxModelLen"
        )
    return DrainGrace(float(grace), why, warning)
