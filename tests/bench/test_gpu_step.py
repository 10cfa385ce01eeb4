"""bench/gpu_step.py, the GPU session's prepared run, end to end in its CPU mode (``--device cpu --smoke``).

The figures of a CPU run mean nothing; what is checked is that every one the GPU run reports is there, and the
arithmetic that relates them: the decode step's floor is the weights read once at the measured copy bandwidth.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_step.py"

# tiny-llama in float32, what a decode step reads: 2 layers of q, k, v, o, gate, up, down and 2 norms, the final
# norm and the LM head (49,152 x 64); not the embedding table, of which a step reads one row per token
WEIGHTS_READ = 4 * (2 * (4096 + 2048 + 2048 + 4096 + 3 * 8192 + 2 * 64) + 64 + 49152 * 64)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # SmolLM2's tokenizer, rebuilt from the bundled GGUF


def test_the_smoke_run_writes_every_figure_of_the_gpu_run(tmp_path: Path) -> None:
    out = tmp_path / "gpu_step.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--smoke", "--out", str(out), "--work-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=280,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report.keys() >= {"device", "commit", "shape", "dtype", "copy_bandwidth_gbps", "attention", "startup"}
    assert report["smoke"] is True and report["shape"] == "tiny-llama"
    step = report["decode_step"]
    assert step["weights_read_bytes"] == WEIGHTS_READ
    expected_floor = WEIGHTS_READ / (report["copy_bandwidth_gbps"] * 1e9) * 1e3
    assert step["floor_ms"] == pytest.approx(expected_floor, rel=0.05)  # the bandwidth is rounded to 0.1 GB/s
    assert step["vs_floor"] == pytest.approx(step["step_ms"] / step["floor_ms"], rel=0.01)
    assert step["target_vs_floor"] == 1.4
    assert [(r["concurrent"], r["output_tokens"]) for r in report["throughput"]] == [(1, 4), (64, 256), (256, 1024)]
    assert all(r["output_tokens_per_s"] > 0 for r in report["throughput"])
    (mixed,) = report["mixed_steps"]
    assert (mixed["decodes"], mixed["chunk"]) == (4, 16)
    assert mixed["mixed_vs_apart"] == pytest.approx(
        mixed["mixed_ms"] / (mixed["decode_ms"] + mixed["prefill_ms"]), 0.01
    )
    attention = report["attention"]
    assert attention["correct"] is True
    assert [(r["seqs"], r["prompt"]) for r in attention["prefill"]] == [(2, 40)]
    assert {"tflops", "sdpa_tflops", "vs_sdpa", "max_err"} <= attention["prefill"][0].keys()
    assert (attention["decode"]["seqs"], attention["decode"]["context"]) == (1, 80)
    assert {"gbps", "vs_copy_bandwidth", "vs_same_size_copy", "target_vs_copy"} <= attention["decode"].keys()
    assert report["startup"]["total_s"] > 0
    graphs = report["graphs_vs_eager"]  # a CPU captures no graphs: the eager step alone
    assert graphs["captured"] is None
    assert [r["batch"] for r in graphs["steps"]] == [1, 64] and all(r["eager_step_ms"] > 0 for r in graphs["steps"])


def test_asked_for_cuda_without_a_gpu_it_says_so_and_writes_nothing(tmp_path: Path) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    out = tmp_path / "gpu_step.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=120, env=env
    )

    assert done.returncode == 2 and "torch sees no CUDA GPU" in done.stdout
    assert not out.exists()
