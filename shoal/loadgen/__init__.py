"""The load generator behind ``shoal bench serve`` (torch-free: it only speaks HTTP); the benchmark scripts that
use it are the top-level ``bench/``, not shipped."""

from shoal.loadgen.datasets import BenchRequest, random_dataset, shared_prefix_dataset
from shoal.loadgen.report import summarize
from shoal.loadgen.runner import BenchConfig, run_benchmark

__all__ = ["BenchConfig", "BenchRequest", "random_dataset", "run_benchmark", "shared_prefix_dataset", "summarize"]
