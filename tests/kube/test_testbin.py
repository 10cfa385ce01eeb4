"""Missing binaries are a loud failure with the fix in the message, never a silent skip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.kube_testbed import BUILD_SCRIPT, KubeTestbinMissing, kube_testbin_dir


def test_missing_override_dir_names_the_missing_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etcd").write_text("")
    monkeypatch.setenv("SHOAL_KUBE_TESTBIN", str(tmp_path))
    with pytest.raises(KubeTestbinMissing, match="lacks kube-apiserver, kube-controller-manager"):
        kube_testbin_dir()


def test_unbuilt_cache_points_at_make_kube_testbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOAL_KUBE_TESTBIN", raising=False)
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    with pytest.raises(KubeTestbinMissing, match="make kube-testbin"):
        kube_testbin_dir()


def test_build_without_go_says_what_is_missing(tmp_path: Path) -> None:
    env = dict(os.environ, PATH="/usr/bin:/bin", SHOAL_CACHE=str(tmp_path))  # /usr/local/go/bin is not on it
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "no Go toolchain" in result.stderr and "Install Go" in result.stderr
