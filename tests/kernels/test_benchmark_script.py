"""bench/kernel_timing.py runs end to end: its GPU code path on tiny shapes under the interpreter (--smoke); so does
bench/lora.py's kernel row."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from kernel_lane import interpreter_only

from shoal.engine.model_config import ModelConfig

# on a GPU host the kernels are already compiled in this process: run bench/kernel_timing.py itself there
pytestmark = [pytest.mark.interpret, interpreter_only, pytest.mark.timeout(120)]

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kernel_timing.py"


def test_kernel_benchmark_prints_its_tables_in_smoke_mode(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)

    assert bench.main(["--smoke"]) == 0

    out = capsys.readouterr().out
    assert "| 2 x 80 |" in out and "| 2 x 40 |" in out
    assert "| decode, 2 x 80, 24, - |" in out and "| prefill, 2 x 40, 16, 2.0 |" in out
    assert "GB/s" in out and "TFLOP/s" in out and "max err" in out and "FAILED" not in out


def test_lora_benchmark_kernel_row_runs_on_tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/lora.py's kernel row (a GPU session's) runs its code path under the interpreter on tiny shapes."""
    monkeypatch.syspath_prepend(
        str(SCRIPT.parent)
    )  # it imports bench/kernel_timing.py, serve.py, ..., scripts beside it
    spec = importlib.util.spec_from_file_location("bench_lora", SCRIPT.parent / "lora.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    config = ModelConfig(
        architecture="llama",
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        vocab_size=16,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        max_position_embeddings=32,
    )

    row = bench.kernel_row(config, 2, 8, 3, device="cpu", prefill_tokens=8, repeats=1)

    assert row["device"] == "cpu (interpreted)"
    assert {key for key in row if key.endswith("_us")} == {
        "decode_3_tokens_triton_us",
        "decode_3_tokens_torch_us",
        "prefill_8_tokens_triton_us",
        "prefill_8_tokens_torch_us",
    }
    for step in ("decode", "prefill"):
        assert 0 <= row[f"{step}_max_abs_err"] <= 0.02 * row[f"{step}_max_abs_delta"]
