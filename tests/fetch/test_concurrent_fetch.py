"""Two processes fetching the same source at once (two engines starting on one node) download it once: the
second waits on the lock and reuses the first one's snapshot (GETs counted at the Hub stand-in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fetch_harness import hub_env
from hub_standin import HubServer
from support.polling import eventually

FILES = {"config.json": b"{}", "tokenizer.json": b"{}", "model.safetensors": b"\x05" * (2 << 20)}


def test_two_processes_at_once_download_once(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/m", FILES)

    def listed_twice() -> bool:
        return sum(r.startswith("GET /api/models/") for r in hub.hub.requests) >= 2

    def hold_downloads(name: str) -> None:
        # no body leaves before both processes have listed the repo, so both are inside fetch() at once
        eventually(listed_twice, timeout=60, what="both processes listing the repo", interval=0.05)

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
