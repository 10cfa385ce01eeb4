"""A fixed fleet reproduces queueing theory: M/M/c waiting times (Erlang C).

One replica whose step time does not depend on the batch, ``max_num_seqs = c`` and one-token prompts is ``c``
servers sharing one FCFS queue; a request needs one step per output token, and geometric output lengths with a
mean of 100 steps of 10 ms make its service time exponential with mean 1 s (to within the 10 ms granularity).
Poisson arrivals at 3 req/s on c = 4 servers: Erlang C gives P(wait) = 0.509 and a mean wait of 0.509 s.
Tolerance: 10% on the mean wait and 0.03 on P(wait), over 40,000 requests (the estimate's own standard error
is about 3%); the first token comes one 10 ms step after admission, and admission waits for a step boundary,
so up to 20 ms of TTFT is not queueing and is subtracted.
"""

from __future__ import annotations

import math

import numpy as np
from sim_fixtures import small_profile

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import RoundRobin
from shoal.simulate.profile import StepCost
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import make_trace

STEP_S = 0.01


def erlang_c(servers: int, offered: float) -> float:
    top = offered**servers / math.factorial(servers) * servers / (servers - offered)
    return top / (sum(offered**k / math.factorial(k) for k in range(servers)) + top)


def test_mmc_waiting_time_matches_erlang_c() -> None:
    servers, arrival_rate, mean_service_s, count = 4, 3.0, 1.0, 40_000
    profile = small_profile(max_num_seqs=servers, step=StepCost(STEP_S, 0.0, 0.0, 0.0))
    rng = np.random.default_rng(7)
    arrival = np.cumsum(rng.exponential(1.0 / arrival_rate, count))
    output = rng.geometric(STEP_S / mean_service_s, count)
    trace = make_trace("mmc", arrival, np.ones(count, np.int64), output)
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(initial_replicas=1))
    wait = np.maximum(run.first_token - arrival - STEP_S, 0.0)
    waited = wait > STEP_S  # admission within one step boundary is not a wait for a server
    p_wait = erlang_c(servers, arrival_rate * mean_service_s)
    mean_wait = p_wait / (servers / mean_service_s - arrival_rate)
    assert abs(waited.mean() - p_wait) < 0.03, (waited.mean(), p_wait)
    assert abs(wait.mean() - mean_wait) < 0.10 * mean_wait, (wait.mean(), mean_wait)


def test_mm1_waiting_time_distribution_is_exponential_tailed() -> None:
    """M/M/1: P(W > t) = rho * exp(-(mu - lambda) t); checked at three points."""
    arrival_rate, count = 0.6, 30_000
    profile = small_profile(max_num_seqs=1, step=StepCost(STEP_S, 0.0, 0.0, 0.0))
    rng = np.random.default_rng(11)
    arrival = np.cumsum(rng.exponential(1.0 / arrival_rate, count))
    output = rng.geometric(STEP_S, count)
    run = simulate(
        make_trace("mm1", arrival, np.ones(count, np.int64), output),
        profile,
        FixedForPeak(1),
        RoundRobin(),
        SimConfig(initial_replicas=1),
    )
    wait = run.first_token - arrival - STEP_S
    for t in (0.5, 1.5, 3.0):
        expected = arrival_rate * math.exp(-(1.0 - arrival_rate) * t)
        assert abs((wait > t).mean() - expected) < 0.03, (t, (wait > t).mean(), expected)
