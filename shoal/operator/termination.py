"""How long an engine pod may take to stop, so that a scale-in loses no request in flight.

The law::

    drain = max_model_len x tpot x DRAIN_MARGIN      the longest a request streaming at SIGTERM can still run
    grace = PRESTOP_SLEEP_SECONDS + drain + EXIT_SECONDS, at most GRACE_CAP_SECONDS

``tpot`` is the time per output token: the fleet's observed one when the caller has it, else the device's default
(``DEFAULT_TPOT_SECONDS``). An unknown ``max_model_len`` (the engine's own default, not known here) takes the cap.
The pod's ``terminationGracePeriodSeconds`` is ``grace``; the engine is given ``drain`` (``shoal serve
--shutdown-grace``) so it aborts what is left, with a clean end to each stream, before the kubelet's SIGKILL.
``spec.engine.terminationGracePeriodSeconds`` replaces ``grace``; the drain is then what it leaves after the
preStop sleep and the exit. Requests with no output yet need no time here: the draining engine refuses them (503)
and the gateway sends them to another replica.

The pod template carries the grace sized from the device default, never from the observed TPOT: a new grace in
the template rolls every engine, and the rollout's own scale-in would run under the old, shorter grace. The observed
TPOT is checked against it instead (:func:`drain_verdict`, the ``DrainFits`` condition), which names the field to
raise when a request of ``maxModelLen`` tokens could outlast the drain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRESTOP_SLEEP_SECONDS = 5  # let EndpointSlices (and so the gateway) drop the pod before it stops accepting
EXIT_SECONDS = 10  # after the drain: abort the rest, close the streams, stop the server
DRAIN_MARGIN = 1.2  # a slower step under a full batch than the observed average
GRACE_CAP_SECONDS = 900  # past this a stuck request holds a node's capacity longer than it is worth
MIN_GRACE_SECONDS = PRESTOP_SLEEP_SECONDS + EXIT_SECONDS + 1  # an explicit grace leaves a drain of at least 1 s
# Per device, until one is observed: a full batch's decode step, on the slow side (SmolLM2-135M on two shared
# cores took 0.18 s a token with four streams: tests/local/test_lossless_scale_in.py), since a short grace loses
# requests and a long one only keeps a pod that takes no new work a little longer.
DEFAULT_TPOT_SECONDS = {"cpu": 0.25, "gpu": 0.05}


@dataclass(frozen=True)
class Termination:
    """The pod's grace period and the engine's drain inside it, both in whole seconds."""

    grace_s: int
    drain_s: int


def _drain_s(max_model_len: int, tpot_s: float) -> int:
    """The longest request's streaming time at ``tpot_s``, with the margin, in whole seconds."""
    return math.ceil(round(max_model_len * tpot_s * DRAIN_MARGIN, 6))  # 120.00000000000001 is 120


def termination(
    max_model_len: int | None, tpot_s: float | None, gpus: int, explicit_grace_s: int | None
) -> Termination:
    """The law above; ``explicit_grace_s`` (the spec's override, at least ``MIN_GRACE_SECONDS``) wins."""
    if explicit_grace_s is not None:
        grace = explicit_grace_s
    elif max_model_len is None:
        grace = GRACE_CAP_SECONDS
    else:
        tpot = tpot_s if tpot_s is not None and tpot_s > 0 else DEFAULT_TPOT_SECONDS["gpu" if gpus else "cpu"]
        grace = min(PRESTOP_SLEEP_SECONDS + _drain_s(max_model_len, tpot) + EXIT_SECONDS, GRACE_CAP_SECONDS)
    return Termination(grace, grace - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS)


def drain_verdict(
    max_model_len: int | None, tpot_s: float | None, gpus: int, explicit_grace_s: int | None
) -> tuple[bool, str, str]:
    """Whether the engines' drain lets a request of ``max_model_len`` tokens finish at the observed ``tpot_s``:
    ``DrainFits``'s (status, reason, message)."""
    applied = termination(max_model_len, None, gpus, explicit_grace_s)
    drain = f"the engines' drain is {applied.drain_s} s (grace {applied.grace_s} s)"
    if tpot_s is None or tpot_s <= 0:
        default = DEFAULT_TPOT_SECONDS["gpu" if gpus else "cpu"]
        basis = (
            "as spec.engine.terminationGracePeriodSeconds sets it" if explicit_grace_s else f"for {default:g} s a token"
        )
        return True, "AssumedTPOT", f"no time per output token observed yet; {drain}, {basis}"
    if max_model_len is None:
        why = f"{drain}, the cap; set spec.engine.maxModelLen to check it against the observed {tpot_s:.3g} s a token"
        return True, "MaxModelLenUnset", why
    need = _drain_s(max_model_len, tpot_s)
    said = f"a {max_model_len}-token request streams for up to {need} s at the observed {tpot_s:.3g} s a token (P90)"
    if need <= applied.drain_s:
        return True, "WithinGrace", f"{said}; {drain}"
    grace = PRESTOP_SLEEP_SECONDS + need + EXIT_SECONDS
    fix = (
        f"set spec.engine.terminationGracePeriodSeconds to {grace}"
        if grace <= GRACE_CAP_SECONDS
        else f"it is past the {GRACE_CAP_SECONDS} s cap: lower spec.engine.maxModelLen"
    )
    return False, "GraceTooShort", f"{said}, but {drain}: a scale-in can cut such a request; {fix}"
