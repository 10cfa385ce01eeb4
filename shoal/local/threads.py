"""How many CPU threads each local engine gets, so a full fleet never oversubscribes the machine.

Every engine runs its forward pass on torch's intra-op thread pool, and torch sizes that pool to every core by
default: three engines on a 4-core laptop would each spin 4 threads, and a decode step that waits on its
slowest thread slows down several-fold under that contention. ``shoal up`` instead divides the cores the
process may use by ``replicas.max`` (the most engines that can run at once), at least one thread each, and
never more than the engine's own ``resources.cpu`` (the same cap a pod's CPU limit puts on it).
"""

from __future__ import annotations

import math
import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    return len(os.sched_getaffinity(0))


def cpu_quantity(quantity: str) -> float | None:
    """A Kubernetes CPU quantity ("2", "500m", "1.5") in cores; None for a suffix no CPU amount uses."""
    try:
        return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
    except ValueError:
        return None


def threads_per_engine(cores: int, max_replicas: int, cpu_limit: str | None = None) -> int:
    """``cores // max_replicas``, capped by ``cpu_limit`` (rounded up), and at least 1."""
    share = cores // max(1, max_replicas)
    limit = cpu_quantity(cpu_limit) if cpu_limit is not None else None
    if limit is not None:
        share = min(share, math.ceil(limit))
    return max(1, share)
