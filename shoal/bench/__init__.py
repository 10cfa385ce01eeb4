"""The load generator behind ``shoal bench serve`` (torch-free: it only speaks HTTP)."""

from shoal.bench.datasets import BenchRequest, random_dataset, shared_prefix_dataset
from shoal.bench.report import summarize
from shoal.bench.runner import BenchConfig, run_benchmark

__all__ = ["BenchConfig", "BenchRequest", "random_dataset", "run_benchmark", "shared_prefix_dataset", "summarize"]
