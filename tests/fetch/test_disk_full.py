"""A full disk, on a real 2 MiB tmpfs: refused before downloading when the files cannot fit, and when the disk
fills up during the download (another writer takes the space), the same error and nothing left behind."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetch_harness import hub_env, run_cli
from hub_standin import HubServer

WEIGHTS = b"\x01" * (3 << 20)  # 3 MiB: more than the tmpfs holds


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _fetch(hub: HubServer, disk: Path, tmp_path: Path) -> dict[str, str]:
    message = tmp_path / "termination"
    done = run_cli(
        "hf://org/big", "--download-dir", str(disk), "--termination-message-path", str(message), env=hub_env(hub)
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].startswith(f"shoal fetch-model: no space left on {disk}: need ")
    return json.loads(message.read_text())


def test_a_model_bigger_than_the_free_space_is_refused_before_downloading(
    hub: HubServer, small_disk: Path, tmp_path: Path
) -> None:
    hub.hub.add_repo("org/big", {"config.json": b"{}", "model.safetensors": WEIGHTS})
    outcome = _fetch(hub, small_disk, tmp_path)
    assert f"need {len(WEIGHTS) + 2} bytes (2097152 free)" in outcome["error"]
    assert "model.safetensors" not in hub.hub.downloads
    assert not list(small_disk.rglob("snapshots/*"))


def test_a_disk_that_fills_up_during_the_download_leaves_nothing(
    hub: HubServer, small_disk: Path, tmp_path: Path
) -> None:
    weights = b"\x02" * (1 << 20)  # fits, until something else takes the space

    def fill(name: str) -> None:
        if name == "model.safetensors":
            subprocess.run(["dd", "if=/dev/zero", f"of={small_disk}/filler", "bs=64k"], capture_output=True)

    hub.hub.add_repo("org/big", {"config.json": b"{}", "model.safetensors": weights})
    hub.hub.on_download = fill
    outcome = _fetch(hub, small_disk, tmp_path)
    assert "no space left on" in outcome["error"]
    assert hub.hub.downloads["model.safetensors"] == 1
    assert not list(small_disk.rglob("snapshots/*"))
    assert not list(small_disk.rglob("*.part")) and not list(small_disk.rglob("model.safetensors"))
