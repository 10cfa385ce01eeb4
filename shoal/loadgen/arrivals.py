"""When each request is sent: a gamma process, as ``vllm bench serve`` does.

Gaps between requests are drawn from a gamma distribution with mean ``1 / rate`` and shape ``burstiness``:
1 is a Poisson process, below 1 burstier, above 1 more regular. An infinite rate sends everything at once
(concurrency alone then shapes the load).
"""

from __future__ import annotations

import math
import random


def arrival_gaps(num_requests: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds to wait before each request (the first waits too, so bursts are drawn from the start)."""
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if rate <= 0:
        raise ValueError(f"request rate must be > 0, got {rate}")
    if math.isinf(rate):
        return [0.0] * num_requests
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)
    return [rng.gammavariate(burstiness, scale) for _ in range(num_requests)]
