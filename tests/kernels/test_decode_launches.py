"""What a decode step launches on the Triton path, counted by ``bench/decode_ops.py`` on the tests' tiny Llama:
RoPE and the KV-cache write go out as one kernel, and a layer launches nine kernels in all."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from kernel_lane import interpreter_only

# counted on the CPU (the interpreter never splits decode attention; a GPU adds a merge kernel when it splits)
pytestmark = [pytest.mark.interpret, interpreter_only, pytest.mark.timeout(300)]

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "decode_ops.py"


def test_a_decode_layer_launches_rope_and_the_kv_write_as_one_kernel() -> None:
    spec = importlib.util.spec_from_file_location("bench_decode_ops", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)

    counts = bench.count_step_ops("triton", layers=1, batch=2, steps=2)

    ops = counts["layer_ops"]
    assert ops["triton _rotary_write_kv_kernel"] == 1
    assert "triton _rotary_kernel" not in ops and "triton _write_kv_kernel" not in ops
    # QKV, O, gate/up, down: torch's linear, or oneDNN's on the weights a CPU packs at load
    assert ops.get("kernel aten::linear", 0) + ops.get("kernel mkldnn::_linear_pointwise", 0) == 4
    assert counts["launches_per_layer"] == 9 and counts["per_layer"]["triton"] == 5
