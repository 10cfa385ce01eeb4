"""moto's venv (``make moto``) missing or stale is a loud failure with the fix in the message, never a silent skip."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetch_harness import MOTO_INSTALL, MotoVenvMissing, moto_python


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("MOTO_VENV", raising=False)
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    moto_python.cache_clear()
    yield tmp_path
    moto_python.cache_clear()  # the other tests find the real venv again


def test_a_missing_venv_points_at_make_moto(empty_cache: Path) -> None:
    with pytest.raises(MotoVenvMissing, match=f"expected at {empty_cache / 'moto-venv'}.*Run `make moto`"):
        moto_python()


def test_a_venv_installed_with_other_pins_is_missing(empty_cache: Path) -> None:
    bin_dir = empty_cache / "moto-venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "moto_server"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir.parent / ".complete").write_text("moto[server]==5.0.0 boto3==1.34.0 botocore==1.34.0")
    with pytest.raises(MotoVenvMissing, match="make moto"):
        moto_python()


def test_an_install_without_python_says_what_is_missing(tmp_path: Path) -> None:
    env = dict(os.environ, SHOAL_CACHE=str(tmp_path), PYTHON="no-such-python3")
    env.pop("MOTO_VENV", None)
    result = subprocess.run(["bash", str(MOTO_INSTALL)], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "'no-such-python3' is not on PATH" in result.stderr and "make moto" in result.stderr
    assert not (tmp_path / "moto-venv").exists()
