"""``shoal bench serve`` against a real ``shoal serve``: counts, percentiles and goodput add up; the chat endpoint;
an API key measures a gateway with auth on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

from shoal.local import LocalProcess, metric

pytestmark = pytest.mark.timeout(180)


def run_bench(
    url: str, out: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Runs the command as a user would; its exit status and the JSON record it wrote."""
    cmd = [
        sys.executable,
        "-m",
        "shoal.cli",
        "bench",
        "serve",
        "--url",
        url,
        "--model",
        TINY_MODEL_NAME,
        "--json",
        str(out),
        "--no-progress",
        *args,
    ]
    environ = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env={**environ, **(env or {})})
    return done, json.loads(out.read_text())


def bench(target: ServeProcess, out: Path, *args: str) -> dict:
    done, record = run_bench(target.url, out, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TTFT (ms)" in done.stdout
    return record


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


def test_the_chat_endpoint_streams_each_prompt_as_a_user_message(bench_target: ServeProcess, tmp_path: Path) -> None:
    record = bench(
        bench_target,
        tmp_path / "out.json",
        "--endpoint",
        "/v1/chat/completions",
        "--num-requests",
        "4",
        "--input-len",
        "8",
        "--output-len",
        "6",
    )
    summary = record["summary"]
    assert (summary["completed"], summary["failed"], summary["output_tokens"]) == (4, 0, 4 * 6)
    assert all(r["ttft"] > 0 and len(r["itls"]) >= 1 for r in record["results"])  # text came in delta.content
    # the chat template wraps each prompt: more prompt tokens than the same prompts sent bare
    bare = bench(bench_target, tmp_path / "bare.json", "--num-requests", "4", "--input-len", "8", "--output-len", "6")
    assert summary["prompt_tokens"] > bare["summary"]["prompt_tokens"]


def test_an_api_key_measures_a_gateway_with_auth_on(authed_gateway: tuple[LocalProcess, str], tmp_path: Path) -> None:
    gateway, key = authed_gateway
    load = ("--num-requests", "4", "--input-len", "8", "--output-len", "5")
    refused, record = run_bench(gateway.url, tmp_path / "none.json", *load)
    assert refused.returncode == 1 and record["summary"]["failed"] == 4
    assert all(r["error"].startswith("HTTP 401") for r in record["results"])

    flag, record = run_bench(gateway.url, tmp_path / "flag.json", *load, "--api-key", key)
    assert flag.returncode == 0, flag.stdout + flag.stderr
    assert (record["summary"]["completed"], record["summary"]["output_tokens"]) == (4, 4 * 5)
    assert key not in (tmp_path / "flag.json").read_text()  # the record keeps no secret

    env, record = run_bench(gateway.url, tmp_path / "env.json", *load, env={"OPENAI_API_KEY": key})
    assert env.returncode == 0 and record["summary"]["completed"] == 4, env.stdout + env.stderr
