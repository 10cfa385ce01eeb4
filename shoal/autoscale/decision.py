"""A scaling decision: the replica count a policy wants, the rule that fired and the values it saw."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ScalingDecision:
    """``replicas`` wanted at ``time``; ``rule`` names the rule (``ScaleUpQueue``, ``HoldTolerance``, ...),
    ``message`` explains it in one line with the values, ``values`` holds those values for status and logs."""

    time: float
    replicas: int
    rule: str
    message: str
    values: Mapping[str, float | None] = field(default_factory=dict)

    def changes(self, current: int) -> bool:
        return self.replicas != current
