"""Runs the gateway and FakeEngines on real loopback ports, each uvicorn server in a thread of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from shoal.gateway.app import create_app
from shoal.gateway.auth import ApiKeys
from shoal.gateway.discovery import static
from shoal.gateway.gateway import Gateway, GatewayConfig
from shoal.gateway.prompts import PromptReader
from shoal.gateway.quota import QuotaStore


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """A uvicorn server in a thread of its own; ``url`` once started, ``stop()`` ends it."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name=f"server-{self.port}")

    def start(self, timeout: float = 10.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def wait_until(check: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class GatewayHandle:
    """A running gateway: its URL, and the ``Gateway`` object behind it for white-box checks."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.server = ServerThread(create_app(gateway)).start()
        self.url = self.server.url

    def wait_healthy(self, count: int, timeout: float = 10.0) -> None:
        wait_until(lambda: sum(r.healthy for r in self.gateway.fleet.replicas.values()) == count, timeout,
                   f"{count} healthy replicas")

    def stop(self) -> None:
        self.server.stop()


class ByteTokenizer:
    """A tokenizer for FakeEngine models: one token per UTF-8 byte (the fake engine tokenizes nothing)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode())

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages) + "<assistant>"


def make_gateway(urls: list[str], byte_tokenized: tuple[str, ...] = ("tiny",), api_keys: ApiKeys | None = None,
                 quota: QuotaStore | None = None, **config: Any) -> Gateway:
    """A gateway over ``urls``; models in ``byte_tokenized`` (FakeEngine's) get the ByteTokenizer."""
    settings = {"health_interval_s": 0.2, "fail_threshold": 1, **config}
    prompts = PromptReader(settings.get("tokenizers"))
    for model in byte_tokenized:
        prompts.add(model, ByteTokenizer())
    return Gateway(GatewayConfig(**settings), static(urls), api_keys, quota, prompts)


class EngineProcess:
    """A real ``shoal serve`` process on a free port; its log stays in ``log_path`` for failing tests."""

    def __init__(self, model: str, log_path: Path, served_name: str = "tiny", *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "shoal.cli", "serve", "--model", model, "--served-model-name", served_name,
                 "--port", str(self.port), "--log-level", "warning", *extra],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def wait_ready(self, timeout: float = 180.0) -> EngineProcess:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"shoal serve exited: {self.log_path.read_text()[-2000:]}")
            try:
                return httpx.get(self.url + "/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout, f"{self.url}/ready")
        return self

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on the engine's own /metrics."""
        text = httpx.get(self.url + "/metrics", timeout=5).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
