"""Starts real ``shoal serve`` processes on free loopback ports and stops them (kill on teardown).

Shared by the server and bench tests. The tiny checkpoint comes from the engine tests' builder, so every
area exercises the same kind of model.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
if str(ENGINE_TESTS) not in sys.path:
    sys.path.insert(0, str(ENGINE_TESTS))

from tiny_checkpoints import build_checkpoint  # noqa: E402

TINY_MODEL_NAME = "tiny-llama"


def build_tiny_model(directory: Path) -> Path:
    """A tiny random Llama (vocab 384, context 256) with a ChatML template."""
    return build_checkpoint(directory, "llama", seed=1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """One ``shoal serve`` subprocess; its output goes to ``log_path`` for post-mortems."""

    def __init__(self, model: Path | str, log_path: Path, *extra_args: str, name: str = TINY_MODEL_NAME) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model_name = name
        self.log_path = log_path
        cmd = [
            sys.executable, "-m", "shoal.cli", "serve", "--model", str(model), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(self.port), *extra_args,
        ]
        self._log = open(log_path, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"shoal serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"shoal serve not ready after {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-5000:]

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log.close()


def metric_values(url: str, name: str) -> dict[str, float]:
    """Samples of one metric from ``/metrics``: the label text (``{...}``) -> value."""
    values = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            values[key[len(name):]] = float(value)
    return values


def metric(url: str, name: str) -> float:
    """The sum of a metric's samples (most have one: ``model="..."``)."""
    return sum(metric_values(url, name).values())


def wait_for(condition, timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Polls ``condition()`` until true or the time is up; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
