"""Every kernel compiles for Hopper (sm_90) down to a cubin, attention (with and without a sliding window and
soft-capped scores), the experts' grouped matmul and LoRA's shrink and expand on tensor cores, nothing spilled.

No GPU needed.

The interpreter checks what the kernels compute; only the real compiler checks that they compile (dot shapes,
constexpr branches, early returns). It runs in a subprocess because this session interprets the kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("gpu_compile.py")


@pytest.mark.slow  # a real compile of eighteen kernel variants: ~35 s
@pytest.mark.timeout(600)
def test_kernels_compile_for_hopper_with_tensor_core_attention_and_no_spills() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "90", "--dtype", "bf16"], env=env, capture_output=True, text=True, timeout=580
    )

    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 18 and all("cubin" in line for line in lines), result.stdout
    assert sum("window" in line for line in lines) == 3 and sum("soft cap" in line for line in lines) == 2
    assert all("wgmma" in line for line in lines if "prefill" in line)
    assert all(" mma," in line for line in lines if "decode" in line)
    assert any("wgmma" in line or " mma," in line for line in lines if "grouped_matmul" in line)
    assert sum("lora_" in line for line in lines) == 3
    assert all("wgmma" in line or " mma," in line for line in lines if "lora_" in line)
    assert all(line.endswith(" 0 bytes spilled") for line in lines), result.stdout
