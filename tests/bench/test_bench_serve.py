"""``shoal bench serve`` against a real ``shoal serve``: counts, percentiles and goodput add up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from serve_harness import ServeProcess

from shoal.local import metric

pytestmark = pytest.mark.timeout(180)


def bench(target: ServeProcess, out: Path, *args: str) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "shoal.cli",
        "bench",
        "serve",
        "--url",
        target.url,
        "--model",
        target.model_name,
        "--json",
        str(out),
        "--no-progress",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TTFT (ms)" in done.stdout
    return json.loads(out.read_text())


def test_random_dataset_at_fixed_concurrency(bench_target: ServeProcess, tmp_path: Path) -> None:
    record = bench(
        bench_target,
        tmp_path / "out.json",
        "--num-requests",
        "12",
        "--concurrency",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "10",
        "--goodput",
        "ttft:60000",
        "tpot:60000",
        "--warmup",
        "1",
    )
    summary = record["summary"]
    assert (summary["completed"], summary["failed"]) == (12, 0)
    assert summary["output_tokens"] == 12 * 10  # ignore_eos: exactly the asked length
    assert len(record["results"]) == 12 and all(len(r["itls"]) >= 1 for r in record["results"])
    for name in ("ttft", "tpot", "itl", "e2el"):
        stats = summary[name]
        assert 0 < stats["p50_ms"] <= stats["p95_ms"] <= stats["p99_ms"]
    assert summary["ttft"]["p99_ms"] <= summary["e2el"]["p99_ms"]
    assert summary["goodput_rps"] == pytest.approx(summary["request_throughput_rps"])  # generous SLOs: all good


def test_shared_prefix_dataset_hits_the_prefix_cache(bench_target: ServeProcess, tmp_path: Path) -> None:
    hits_before = metric(bench_target.url, "shoal_engine_prefix_cache_hits_tokens_total")
    record = bench(
        bench_target,
        tmp_path / "out.json",
        "--dataset",
        "shared-prefix",
        "--num-requests",
        "8",
        "--num-prefix-groups",
        "2",
        "--prefix-len",
        "24",
        "--suffix-len",
        "4",
        "--output-len",
        "4",
        "--request-rate",
        "40",
        "--burstiness",
        "0.5",
        "--goodput",
        "ttft:0.001",
    )
    assert record["summary"]["completed"] == 8
    assert record["summary"]["goodput_rps"] == 0  # nobody meets a 1 us TTFT
    assert metric(bench_target.url, "shoal_engine_prefix_cache_hits_tokens_total") > hits_before
