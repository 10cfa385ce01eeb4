"""One Shoal server (engine or gateway) as a child process on a free loopback port.

The child runs in a session of its own, so ``stop`` takes down everything it started; its output goes to a log
file that outlives it, for post-mortems. Readiness is an HTTP path answering 200, checked together with the
process being alive, so a server that dies while loading fails at once with its log instead of timing out.
``die_with_parent`` asks the kernel to SIGKILL the child when its parent dies (``PR_SET_PDEATHSIG``), so a
``shoal up`` killed with SIGKILL leaves no orphan engines behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_pair() -> int:
    """A loopback port nobody listens on right now whose next port is free too (vLLM's KV events and replay)."""
    while True:
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it when the parent thread exits (Linux only)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def shoal_command(*args: str) -> list[str]:
    """The ``shoal`` command line run by this interpreter (works without the venv's scripts on PATH)."""
    return [sys.executable, "-m", "shoal.cli", *args]


class LocalProcess:
    """A server started as ``argv --port PORT``; ``url`` reaches it once ``wait_ready`` returns."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        port: int | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                preexec_fn=_die_with_parent if die_with_parent else None,
            )

    def wait_ready(self, path: str = "/ready", timeout: float = 300.0) -> LocalProcess:
        """Returns once ``path`` answers 200; raises with the log if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.log_path.name}: exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.url}{path} not ready after {timeout} s:\n{self.log()}")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the process has used so far, from ``/proc``: what a benchmark charges it."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log(self, chars: int = 5000) -> str:
        """The end of the process's output."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def terminate(self) -> None:
        """Asks for a graceful shutdown (SIGTERM), as Kubernetes does."""
        self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Kills the process and everything it started: its whole process group, even once the process itself
        has exited (vLLM's engine core and workers outlive its API server)."""
        if self.process.returncode is not None:  # reaped: its pid, and so the group's id, may be reused
            return
        with contextlib.suppress(ProcessLookupError):  # nothing of the group is left
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
