"""Two processes fetching the same source at once (two engines starting on one node) download it once: the
second waits on the lock and reuses the first one's snapshot (GETs counted at the Hub stand-in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fetch_harness import hub_env
from hub_standin import HubServer
from support.polling import eventually

from shoal.fetch.cache import CacheEntry
from shoal.fetch.sources import parse_source

FILES = {"config.json": b"{}", "tokenizer.json": b"{}", "model.safetensors": b"\x05" * (2 << 20)}


def _blocked_on(lock: Path) -> bool:
    """Whether a process waits for ``lock`` (a ``->`` line for its inode in ``/proc/locks``)."""
    inode = f":{lock.stat().st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def test_two_processes_at_once_download_once(hub: HubServer, tmp_path: Path) -> None:
    commit = hub.hub.add_repo("org/m", FILES)
    source = parse_source("hf://org/m")
    assert source is not None
    lock = CacheEntry(tmp_path, source).dir / "locks" / f"{commit}.lock"

    def hold_downloads(name: str) -> None:
        # the first process's downloads wait until the second one is blocked on the lock: they overlap for sure
        eventually(lambda: _blocked_on(lock), timeout=60, what="the second process waiting on the lock", interval=0.05)

    hub.hub.on_download = hold_downloads
    command = [sys.executable, "-m", "shoal.cli", "fetch-model", "hf://org/m", "--download-dir", str(tmp_path)]
    processes = [
        subprocess.Popen(command, env=hub_env(hub), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    assert len({out.strip().splitlines()[-1] for out, _ in outputs}) == 1
    assert dict(hub.hub.downloads) == {name: 1 for name in FILES}
    assert sum("another process is fetching it" in err for _, err in outputs) == 1
