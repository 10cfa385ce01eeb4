"""Helpers for the image tests: hack/images/build.sh run the way `make images` runs it, and buildah."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "images" / "build.sh"
BUILDAH = ["buildah", "--storage-driver", "vfs"]  # the build script's default BUILDAH_FLAGS


def run_build(*args: str, timeout: float = 900, **env: str) -> subprocess.CompletedProcess[str]:
    """``build.sh`` with this interpreter's Shoal, the given settings and none inherited from the caller."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if k not in {"BUILDER", "BASE_IMAGE", "WHEELHOUSE", "OPERATOR_IMAGE", "ENGINE_IMAGE"}
    }
    return subprocess.run(
        ["bash", str(BUILD), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**inherited, "PY": sys.executable, **env},
        cwd=REPO,
    )


def buildah(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} failed:\n{result.stderr}")
    return result
