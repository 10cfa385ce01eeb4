"""Shoal's parts as local processes on this machine: what ``shoal up``, the tests and the benchmarks run."""

from shoal.local.process import LocalProcess, free_port, shoal_command

__all__ = ["LocalProcess", "free_port", "shoal_command"]
