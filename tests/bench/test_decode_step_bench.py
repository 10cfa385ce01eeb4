"""``bench/decode_step.py`` runs as documented on the tiny model with int4 projections: a step's CPU and wall time,
both of its one-process comparisons (one-call layers against the modules, the C small ops against torch's), each
side's blocks reported, and mixed steps (decodes beside a prompt's prefill) against the two apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "decode_step.py"


def test_a_short_run_times_a_step_and_both_comparisons(bench_model: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--model", str(bench_model), "--quantization", "int4"]
    command += ["--dtype", "float32", "--steps", "3", "--prompt-len", "8", "--batch", "2"]
    command += ["--compare-decode-stack", "2", "--compare-layer-ops", "2", "--mixed", "2:16", "3:40"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout[done.stdout.index("{") :])
    assert report["quantization"] == "int4" and report["kernels"] == ["q4_1"] and report["batch"] == 2
    assert report["wall_ms_per_step"] > 0 and report["cpu_ms_per_step"] > 0
    stack = report["decode_stack"]
    assert len(stack["stack_blocks"]) == len(stack["modules_blocks"]) == 2
    assert stack["modules_over_stack"] == pytest.approx(
        stack["modules_ms_per_step"] / stack["stack_ms_per_step"], rel=0.02
    )
    layer_ops = report["layer_ops"]
    assert len(layer_ops["c_blocks"]) == len(layer_ops["torch_blocks"]) == 2
    assert layer_ops["torch_over_c"] > 0
    assert [(m["decodes"], m["chunk"]) for m in report["mixed"]] == [(2, 16), (3, 40)]
    for mixed in report["mixed"]:  # each kind timed (a step that did not prefill the prompt whole fails the run)
        assert min(mixed["decode_ms"], mixed["prefill_ms"], mixed["mixed_ms"]) > 0
        apart = mixed["decode_ms"] + mixed["prefill_ms"]
        assert mixed["mixed_vs_apart"] == pytest.approx(mixed["mixed_ms"] / apart, rel=0.01)


def test_the_profile_records_the_decoding_steps(bench_model: Path) -> None:
    """``--profile`` profiles steps that decode (the timed run leaves the engine empty; profiling an empty engine
    recorded nothing): every step's projections show among the ops, with their share of the CPU time."""
    command = [sys.executable, str(SCRIPT), "--model", str(bench_model), "--dtype", "float32"]
    command += ["--steps", "3", "--prompt-len", "8", "--batch", "2", "--profile"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout[done.stdout.rindex("\n{") :])
    assert report["profiled_cpu_ms_per_step"] > 0 and report["profiled_matmul_ms_per_step"] > 0
    assert 0 < report["profiled_matmul_share"] < 1
