"""shoal.simulate: the fleet simulator that runs the real autoscaling and routing policies against traces."""

from shoal.simulate.compare import Comparison, compare
from shoal.simulate.profile import EngineProfile, ProfileError, load_profile
from shoal.simulate.simulator import SimConfig, SimRun, simulate
from shoal.simulate.trace import Trace, TraceError, load_trace, make_trace

__all__ = [
    "Comparison",
    "EngineProfile",
    "ProfileError",
    "SimConfig",
    "SimRun",
    "Trace",
    "TraceError",
    "compare",
    "load_profile",
    "load_trace",
    "make_trace",
    "simulate",
]
