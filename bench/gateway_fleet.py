"""Processes for the gateway benchmarks: real ``shoal serve`` engines and ``shoal gateway``, on loopback ports."""

from __future__ import annotations

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Process:
    """A child process in its own session (killed with its children), its output in ``log_path``."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, **(env or {})},
            )

    def wait_ready(self, path: str = "/ready", timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.log_path.name} exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"{self.url}{path} not ready after {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def shoal(*args: str) -> list[str]:
    return [sys.executable, "-m", "shoal.cli", *args]


def start_engines(model: str, count: int, served_name: str, log_dir: Path, *extra: str) -> list[Process]:
    """``count`` engines, one CPU thread each so that several share the machine fairly; waits until all ready."""
    engines = [Process(shoal("serve", "--model", model, "--served-model-name", served_name, "--log-level",
                             "warning", *extra), log_dir / f"engine-{i}.log", {"OMP_NUM_THREADS": "1"})
               for i in range(count)]
    for engine in engines:
        engine.wait_ready()
    return engines


def start_gateway(backends: Sequence[str], log_dir: Path, *extra: str) -> Process:
    argv = shoal("gateway", "--log-level", "warning", *(a for url in backends for a in ("--backend", url)), *extra)
    gateway = Process(argv, log_dir / "gateway.log")
    gateway.wait_ready()
    return gateway


def metric(url: str, name: str) -> float:
    """The sum of a metric's samples on a /metrics page."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))
