"""Runs the gateway and FakeEngines on real loopback ports, each uvicorn server in a thread of its own."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from support.devices import TEST_DEVICE
from support.polling import eventually

from shoal.gateway.app import create_app
from shoal.gateway.auth import ApiKeys
from shoal.gateway.discovery import static
from shoal.gateway.gateway import Gateway, GatewayConfig
from shoal.gateway.prompts import PromptReader
from shoal.gateway.quota import QuotaStore
from shoal.local import LocalProcess, free_port, shoal_command


class ServerThread:
    """A uvicorn server in a thread of its own; ``url`` once started, ``stop()`` ends it."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
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


class GatewayHandle:
    """A running gateway: its URL, and the ``Gateway`` object behind it for white-box checks."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.server = ServerThread(create_app(gateway)).start()
        self.url = self.server.url

    def wait_healthy(self, count: int, timeout: float = 10.0) -> None:
        eventually(
            lambda: sum(r.healthy for r in self.gateway.fleet.replicas.values()) == count,
            timeout,
            f"{count} healthy replicas",
        )

    def stop(self) -> None:
        self.server.stop()


class ByteTokenizer:
    """A tokenizer for FakeEngine models: one token per UTF-8 byte (the fake engine tokenizes nothing)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode())

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **variables: Any
    ) -> str:
        return "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages) + "<assistant>"


def make_gateway(
    urls: list[str],
    byte_tokenized: tuple[str, ...] = ("tiny",),
    api_keys: ApiKeys | None = None,
    quota: QuotaStore | None = None,
    model_quota: QuotaStore | None = None,
    **config: Any,
) -> Gateway:
    """A gateway over ``urls``; models in ``byte_tokenized`` (FakeEngine's) get the ByteTokenizer."""
    settings = {"health_interval_s": 0.2, "fail_threshold": 1, **config}
    prompts = PromptReader(settings.get("tokenizers"))
    for model in byte_tokenized:
        prompts.add(model, ByteTokenizer())
    return Gateway(GatewayConfig(**settings), static(urls), api_keys, quota, prompts, model_quota)


class EngineProcess(LocalProcess):
    """A real ``shoal serve`` process on a free port, on the suite's ``TEST_DEVICE``; its log stays in
    ``log_path`` for failing tests."""

    def __init__(self, model: str, log_path: Path, served_name: str = "tiny", *extra: str) -> None:
        argv = shoal_command("serve", "--model", model, "--served-model-name", served_name, "--log-level", "warning")
        argv += ["--device", TEST_DEVICE]
        super().__init__([*argv, *extra], log_path)
