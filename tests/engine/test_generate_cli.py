"""``shoal generate`` end to end: the installed command, the bundled model, a real answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SHOAL = Path(sys.executable).parent / "shoal"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_generate_answers_paris_with_the_bundled_model() -> None:
    result = subprocess.run(
        [
            str(SHOAL),
            "generate",
            "--model",
            "smollm2-135m",
            "--max-tokens",
            "8",
            "--enforce-eager",
            "The capital of France is",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model.gguf", "hi"], "/nonexistent/model.gguf"),
        (["--top-p", "1.5", "hi"], "top_p"),
        (["--device", "cuda", "hi"], "--device cuda"),
        (["--quantization", "int8", "--dtype", "float32", "hi"], "--quantization"),
        (
            ["--gpu-memory-utilization", "0", "hi"],
            "gpu_memory_utilization (--gpu-memory-utilization) must be in (0, 1]",
        ),
    ],
)
def test_generate_reports_bad_arguments_by_name(args: list[str], message: str) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine that has one
    result = subprocess.run([str(SHOAL), "generate", *args], capture_output=True, text=True, timeout=110, env=env)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
