"""Starts real ``shoal serve`` processes on free loopback ports and stops them (kill on teardown).

Shared by the server and bench tests. The tiny checkpoint comes from the engine tests' builder, so every
area exercises the same kind of model.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from support.devices import TEST_DEVICE

from shoal.local import LocalProcess, shoal_command

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
if str(ENGINE_TESTS) not in sys.path:
    sys.path.insert(0, str(ENGINE_TESTS))

from tiny_checkpoints import QWEN_TOOLS_CHAT_TEMPLATE, build_checkpoint  # noqa: E402

TINY_MODEL_NAME = "tiny-llama"
TOOLS_MODEL_NAME = "tiny-qwen"


def build_tiny_model(directory: Path, context: int = 256) -> Path:
    """A tiny random Llama (vocab 384, ``context`` positions) with a ChatML template."""
    return build_checkpoint(directory, "llama", seed=1, max_position_embeddings=context)


def build_tools_model(directory: Path) -> Path:
    """A tiny random Qwen2 with Qwen2.5's own tool-calling chat template (hermes ``<tool_call>`` calls); 2,048
    positions, since the template's system turn lists every tool."""
    return build_checkpoint(
        directory, "qwen2", seed=3, chat_template=QWEN_TOOLS_CHAT_TEMPLATE, max_position_embeddings=2048
    )


class ServeProcess(LocalProcess):
    """One ``shoal serve`` subprocess serving ``name``; its output goes to ``log_path`` for post-mortems.

    It runs on ``device`` (the suite's ``TEST_DEVICE`` unless given; ``None`` leaves the choice to the server),
    before ``extra_args``, so a test's own ``--device`` wins."""

    def __init__(
        self,
        model: Path | str,
        log_path: Path,
        *extra_args: str,
        name: str = TINY_MODEL_NAME,
        env: dict[str, str] | None = None,
        device: str | None = TEST_DEVICE,
    ) -> None:
        self.model_name = name
        argv = shoal_command("serve", "--model", str(model), "--served-model-name", name, "--host", "127.0.0.1")
        argv += ["--device", device] if device else []
        super().__init__([*argv, *extra_args], log_path, env=env)


def wait_for(condition, timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Polls ``condition()`` until true or the time is up; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
