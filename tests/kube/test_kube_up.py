"""`make kube-up` serves the pinned release to kubectl and helm; `make kube-down` leaves no process behind."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from support.kube_testbed import REPO_ROOT, kube_testbin_dir, kubectl_binary

pytestmark = pytest.mark.kube


def pinned_kube_version() -> str:
    versions = (REPO_ROOT / "hack" / "kube-testbin" / "versions.env").read_text()
    match = re.search(r"^KUBE_VERSION=(\S+)$", versions, re.MULTILINE)
    assert match
    return match.group(1)


def make(target: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "MFLAGS"}
    # -o: a pyproject.toml newer than the venv stamp must not turn this test into a pip install
    argv = ["make", "-s", "-C", str(REPO_ROOT), "-o", ".venv/.installed", target, f"KUBE_UP_DIR={state_dir}"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=400)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


def test_kube_up_serves_pinned_version_and_kube_down_cleans_up(tmp_path: Path) -> None:
    kube_testbin_dir()  # fails with the build hint when the binaries are missing
    state_dir = tmp_path / "kube-up"
    up = make("kube-up", state_dir)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kubeconfig = state_dir / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        env = dict(os.environ, KUBECONFIG=str(kubeconfig))

        version = subprocess.run(
            [str(kubectl_binary()), "get", "--raw", "/version"], env=env, capture_output=True, text=True, check=True
        ).stdout
        assert f'"gitVersion": "{pinned_kube_version()}"' in version
        nodes = subprocess.run(
            [str(kubectl_binary()), "get", "nodes", "-o", "name"], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        assert "node/gpu-node-0" in nodes
        helm = subprocess.run([str(kube_testbin_dir() / "helm"), "list", "-A"], env=env, capture_output=True, text=True)
        assert helm.returncode == 0, helm.stderr
        assert processes_mentioning(str(state_dir))
    finally:
        down = make("kube-down", state_dir)
    assert down.returncode == 0, down.stdout + down.stderr
    assert processes_mentioning(str(state_dir)) == []
