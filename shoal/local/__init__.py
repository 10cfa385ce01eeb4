"""Shoal's parts as local processes on this machine: what ``shoal up``, the tests and the benchmarks run."""

from shoal.local.metrics import metric, metric_values
from shoal.local.process import LocalProcess, free_port, shoal_command

__all__ = ["LocalProcess", "free_port", "metric", "metric_values", "shoal_command"]
