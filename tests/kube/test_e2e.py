"""hack/e2e.py, the end-to-end run `make e2e-kind` does on kind, on the kwok test bed here (its serving steps
replaced by what kwok can check); and the kind variant stopping at once, saying why, without a container
runtime that can run kind's nodes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[2] / "hack" / "e2e.py"


@pytest.mark.kube
@pytest.mark.timeout(600)
def test_e2e_passes_on_the_kwok_test_bed() -> None:
    result = subprocess.run(
        [sys.executable, str(E2E), "--cluster", "kwok"], capture_output=True, text=True, timeout=540
    )
    assert result.returncode == 0, result.stdout + result.stderr
    steps = [line for line in result.stdout.splitlines() if line.startswith("==> ")]
    assert len(steps) == 9 and result.stdout.rstrip().endswith("e2e (kwok) passed"), result.stdout


def test_kind_without_a_container_runtime_fails_fast_and_says_why() -> None:
    result = subprocess.run(
        [sys.executable, str(E2E), "--cluster", "kind"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert result.returncode == 1
    assert "no container runtime can start one here" in result.stderr
    assert "docker is not installed" in result.stderr and "podman is not installed" in result.stderr
    assert "make e2e-kwok" in result.stderr and "==>" not in result.stdout
