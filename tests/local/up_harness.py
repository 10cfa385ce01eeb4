"""``shoal up`` as a child process of the test, watched through the gateway's ``/dashboard/data`` and ``/proc``;
the manifests the tests give it; and waiting on an in-process ``Up``'s fleet."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from shoal.local import free_port, shoal_command

if TYPE_CHECKING:
    from shoal.local.up import Up


def manifest(source: str, **spec: Any) -> dict[str, Any]:
    """An InferenceDeployment for ``source``; ``spec`` entries replace whole top-level spec blocks."""
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "local-test"},
        "spec": {"model": {"source": source}, **spec},
    }


async def until(check: Callable[[], object], timeout: float, what: str, up: Up) -> None:
    """Polls ``check`` until it holds; fails naming ``what`` with the fleet's events."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            events = "\n".join(e.text for e in up.fleet.events)
            raise AssertionError(f"{what}: not after {timeout} s; fleet events:\n{events}")
        await asyncio.sleep(0.2)


def write_manifest(directory: Path, document: dict[str, Any], name: str = "fleet.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(document))
    return path


def _processes_with(field: int, wanted: set[int]) -> set[int]:
    """Processes whose ``/proc/PID/stat`` field ``field`` (counted after the command: 1 the parent, 2 the process
    group) is in ``wanted``, right now."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[field]) in wanted:
                found.add(int(entry.name))
    return found


def children_of(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` right now."""
    return _processes_with(1, {pid})


def in_process_groups(leaders: set[int]) -> set[int]:
    """Processes in the process groups these processes lead (the engines start sessions of their own), even
    after the leaders have exited."""
    return _processes_with(2, leaders)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


class UpProcess:
    """``shoal up FILE --no-tui`` with its output in ``log_dir/up.out``; ``seen`` collects every child it had.
    Without ``tui_flag`` it relies on stdout not being a terminal to get log lines."""

    def __init__(self, manifest: Path, log_dir: Path, *extra: str, tui_flag: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = log_dir / "up.out"
        self.seen: set[int] = set()
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(
                shoal_command(
                    "up",
                    str(manifest),
                    *(["--no-tui"] if tui_flag else []),
                    "--log-dir",
                    str(log_dir),
                    "--port",
                    str(self.port),
                    *extra,
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def snapshot(self) -> dict[str, Any] | None:
        """The fleet as ``shoal up`` last wrote it, through the gateway; None while there is none."""
        self.seen |= children_of(self.process.pid)
        try:
            response = httpx.get(self.url + "/dashboard/data", timeout=5)
        except httpx.HTTPError:
            return None
        return response.json()["snapshot"] if response.status_code == 200 else None

    def ready(self) -> int:
        snapshot = self.snapshot()
        return sum(r["phase"] == "ready" for r in snapshot["replicas"]) if snapshot else 0

    def serving(self) -> bool:
        """The gateway routes: some engine is ready and it has seen it."""
        try:
            return httpx.get(self.url + "/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def signal(self, sig: signal.Signals) -> None:
        self.seen |= children_of(self.process.pid)
        self.process.send_signal(sig)

    def kill_everything(self) -> None:
        """Teardown: whatever is left of this run, gone."""
        self.process.kill()
        self.process.wait(timeout=30)
        for pid in self.seen:
            try:
                if b"shoal.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():  # not a reused pid
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        for pid in in_process_groups(self.seen):  # what the engines started (vLLM's engine core and workers)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
