"""Named traces: generated ones (``steady``, ``diurnal``, ``bursty`` and the families below) and the two public
Azure traces.

Generated traces are sized in units of one replica's estimated capacity under the chosen profile
(:meth:`EngineProfile.capacity_rps` for the preset's request shapes), so ``--trace bursty`` exercises a fleet of a
few to a dozen replicas whether the profile is an H100 or this CPU. Arrivals are a gamma renewal process (shape
1 is Poisson, below 1 burstier) run through a time change by the rate curve, so the rate follows the curve
exactly on average and the burstiness holds at every rate. Requests have log-normal prompt and output lengths;
most share one of a few dozen system prompts, chosen with Zipf-like popularity.

- ``steady``: one hour at a constant 4 units (Poisson): the flapping check.
- ``diurnal``: two hours from 1.5 units up to 6 and back (a day's shape, compressed).
- ``bursty``: 90 minutes at 2 units with bursty gaps (gamma shape 0.5), and three 5-minute steps to 3x the
  base, marked as bursts so that each policy's response time is measured.

Families no policy was tuned on (issue 33), each an hour or so so that ten seeds stay affordable:

- ``bursty-jitter``: ``bursty`` whose bursts do not keep time: the first at 15 minutes, each next one after a
  gap drawn from the seed, 20 to 30 minutes (a recurring load whose interval varies as a real one does).
- ``weekly``: a week of diurnal days compressed to 10 minutes each (70 minutes): weekdays from 1 unit up to 6 and
  back, the two weekend days only up to 3.
- ``flash-crowd``: an hour at 2 units; at a time drawn from the seed (15 to 40 minutes in) the rate jumps to
  8 units at once and decays back with a 5-minute time constant (marked as a burst).
- ``ramp``: an hour from 1 unit, rising linearly over 45 minutes from minute 5 to 6 units, then held.
- ``heavy-tail``: an hour at 3 units whose prompts are Pareto-distributed (shape 1.2, from 64 tokens, capped at
  8192): most are short, a few are long enough to fill a batch's token budget alone.
- ``azure-conv``, ``azure-code``: the Azure LLM inference traces 2023 (CC-BY 4.0, Patel et al., "Splitwise",
  ISCA 2024), read from ``../shared/data/azure-llm-inference-2023/`` next to the checkout or from
  ``$SHOAL_AZURE_TRACE_DIR``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from shoal.simulate.profile import EngineProfile
from shoal.simulate.trace import Trace, TraceError, load_trace, make_trace

GENERATED = ("steady", "diurnal", "bursty", "bursty-jitter", "weekly", "flash-crowd", "ramp", "heavy-tail")
AZURE = {"azure-conv": "AzureLLMInferenceTrace_conv.csv", "azure-code": "AzureLLMInferenceTrace_code.csv"}
PRESETS = GENERATED + tuple(AZURE)
PROMPT_MEDIAN, PROMPT_SIGMA = 600, 0.8
OUTPUT_MEDIAN, OUTPUT_SIGMA = 150, 0.9
PREFIX_GROUPS, PREFIX_SHARE = 32, 0.7
PREFIX_TOKENS = (256, 1024)
GRID_S = 1.0
PARETO_SHAPE, PARETO_MIN_TOKENS, MAX_PROMPT_TOKENS = 1.2, 64, 8192


def azure_dir() -> Path:
    configured = os.environ.get("SHOAL_AZURE_TRACE_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data" / "azure-llm-inference-2023"


def request_shapes(rng: np.random.Generator, n: int, heavy_tail: bool = False) -> tuple[np.ndarray, ...]:
    """(prompt, output, prefix group, prefix tokens) of ``n`` requests shaped as the generated presets make them;
    ``heavy_tail`` draws the prompts that share no prefix from a Pareto law instead of a log-normal one."""
    output = np.clip(np.round(rng.lognormal(np.log(OUTPUT_MEDIAN), OUTPUT_SIGMA, n)), 1, 2048).astype(np.int64)
    suffix = np.clip(np.round(rng.lognormal(np.log(PROMPT_MEDIAN / 4), PROMPT_SIGMA, n)), 8, 8192).astype(np.int64)
    group_prefix = rng.integers(PREFIX_TOKENS[0], PREFIX_TOKENS[1] + 1, PREFIX_GROUPS)
    popularity = 1.0 / np.arange(1, PREFIX_GROUPS + 1)
    group = rng.choice(PREFIX_GROUPS, size=n, p=popularity / popularity.sum())
    shared = rng.random(n) < PREFIX_SHARE
    group = np.where(shared, group, -1)
    prefix = np.where(shared, group_prefix[np.maximum(group, 0)], 0)
    if heavy_tail:
        alone = np.round(PARETO_MIN_TOKENS * (1 + rng.pareto(PARETO_SHAPE, n)))
    else:
        alone = np.round(rng.lognormal(np.log(PROMPT_MEDIAN), PROMPT_SIGMA, n))
    alone = np.clip(alone, 8, MAX_PROMPT_TOKENS).astype(np.int64)
    prompt = np.where(shared, prefix + suffix, alone)
    return prompt, output, group, prefix


def _arrivals(
    rng: np.random.Generator, rate: Callable[[np.ndarray], np.ndarray], duration: float, burstiness: float
) -> np.ndarray:
    """A gamma renewal process of shape ``burstiness`` time-changed to follow ``rate`` (requests/s)."""
    grid = np.arange(0.0, duration + GRID_S, GRID_S)
    cumulative = np.concatenate([[0.0], np.cumsum(rate(grid[:-1]) * GRID_S)])
    expected = cumulative[-1]
    gaps = rng.gamma(burstiness, 1.0 / burstiness, int(expected * 1.2 + 100))
    operational = np.cumsum(gaps)
    operational = operational[operational < expected]
    return np.interp(operational, cumulative, grid)


def generate(name: str, profile: EngineProfile, seed: int = 0) -> Trace:
    """One of the generated presets for ``profile`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    heavy_tail = name == "heavy-tail"
    probe = request_shapes(np.random.default_rng(seed + 1), 4096, heavy_tail)
    unit = profile.capacity_rps(float(probe[0].mean()), float(probe[1].mean()))
    bursts: tuple[float, ...] = ()
    if name == "steady":
        duration, burstiness = 3600.0, 1.0

        def rate(t: np.ndarray) -> np.ndarray:
            return np.full_like(t, 4.0 * unit)
    elif name == "diurnal":
        duration, burstiness = 7200.0, 1.0

        def rate(t: np.ndarray) -> np.ndarray:
            return unit * (1.5 + 4.5 * (1 - np.cos(2 * np.pi * t / duration)) / 2)
    elif name in ("bursty", "bursty-jitter"):
        duration, burstiness = 5400.0, 0.5
        bursts = (900.0, 2400.0, 3900.0)
        if name == "bursty-jitter":
            bursts = tuple(float(t) for t in 900.0 + np.cumsum([0.0, *rng.uniform(1200.0, 1800.0, 2)]))

        def rate(t: np.ndarray) -> np.ndarray:
            inside = np.zeros_like(t, dtype=bool)
            for start in bursts:
                inside |= (t >= start) & (t < start + 300.0)
            return np.where(inside, 6.0 * unit, 2.0 * unit)
    elif name == "weekly":
        duration, burstiness, day = 4200.0, 1.0, 600.0

        def rate(t: np.ndarray) -> np.ndarray:
            amplitude = np.where(t // day >= 5, 2.0, 5.0)
            return unit * (1.0 + amplitude * (1 - np.cos(2 * np.pi * t / day)) / 2)
    elif name == "flash-crowd":
        duration, burstiness = 3600.0, 1.0
        flash = float(rng.uniform(900.0, 2400.0))
        bursts = (flash,)

        def rate(t: np.ndarray) -> np.ndarray:
            after = np.maximum(t - flash, 0.0)
            return unit * (2.0 + np.where(t >= flash, 6.0 * np.exp(-after / 300.0), 0.0))
    elif name == "ramp":
        duration, burstiness = 3600.0, 1.0

        def rate(t: np.ndarray) -> np.ndarray:
            return unit * (1.0 + 5.0 * np.clip((t - 300.0) / 2700.0, 0.0, 1.0))
    elif name == "heavy-tail":
        duration, burstiness = 3600.0, 1.0

        def rate(t: np.ndarray) -> np.ndarray:
            return np.full_like(t, 3.0 * unit)
    else:
        raise TraceError(f"unknown generated trace {name!r}; choose {', '.join(GENERATED)}")
    arrival = _arrivals(rng, rate, duration, burstiness)
    prompt, output, group, prefix = request_shapes(rng, len(arrival), heavy_tail)
    return make_trace(name, arrival, prompt, output, group, prefix, bursts)


def resolve_trace(spec: str, profile: EngineProfile, seed: int = 0) -> Trace:
    """``--trace``: a generated preset, an Azure preset, or a trace file."""
    if spec in GENERATED:
        return generate(spec, profile, seed)
    if spec in AZURE:
        path = azure_dir() / AZURE[spec]
        if not path.is_file():
            raise TraceError(
                f"trace {spec}: {path} is missing; put the Azure LLM inference trace 2023 there "
                "(github.com/Azure/AzurePublicDataset) or set SHOAL_AZURE_TRACE_DIR"
            )
        return load_trace(path)
    if not Path(spec).exists():
        raise TraceError(f"trace {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    return load_trace(spec)
