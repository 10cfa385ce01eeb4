"""Server fixtures: real ``shoal serve`` processes with a tiny random model, shared for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from serve_harness import TOOLS_MODEL_NAME, ServeProcess, build_tiny_model, build_tools_model

from lora_adapters import write_adapter  # isort: skip  (serve_harness puts tests/engine on the path)
from tiny_checkpoints import build_shared_checkpoint  # isort: skip

from shoal.model_registry import resolve_model
from shoal.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("server-tiny-llama"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Tokenizer:
    return Tokenizer.from_source(resolve_model(str(tiny_model_dir)))


def _start(
    tmp_path_factory: pytest.TempPathFactory, model: Path | str, *args: str, **options: str
) -> Iterator[ServeProcess]:
    server = ServeProcess(model, tmp_path_factory.mktemp("serve-log") / "serve.log", *args, **options)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[ServeProcess]:
    """The shared server: 512 KV blocks of 16 tokens, up to 64 sequences in a batch."""
    yield from _start(tmp_path_factory, tiny_model_dir, "--num-kv-blocks", "512", "--max-num-seqs", "64")


@pytest.fixture(scope="session")
def constrained_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """One sequence at a time, two may wait, and each may generate for 0.3 s: admission and time limits. Its model
    has 4,096 positions, so a request can ask for more tokens than any machine generates in 0.3 s."""
    yield from _start(
        tmp_path_factory,
        build_tiny_model(tmp_path_factory.mktemp("server-tiny-llama-4k"), context=4096),
        "--max-num-seqs",
        "1",
        "--max-waiting-requests",
        "2",
        "--request-timeout",
        "0.3",
    )


@pytest.fixture(scope="session")
def tools_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tools_model(tmp_path_factory.mktemp("server-tiny-qwen-tools"))


@pytest.fixture(scope="session")
def tools_server(tmp_path_factory: pytest.TempPathFactory, tools_model_dir: Path) -> Iterator[ServeProcess]:
    """The tiny Qwen with Qwen's tool template, letting the model choose tools (its parser found in the template)."""
    yield from _start(
        tmp_path_factory, tools_model_dir, "--enable-auto-tool-choice", "--num-kv-blocks", "512", name=TOOLS_MODEL_NAME
    )


@pytest.fixture
def client(server: ServeProcess) -> openai.OpenAI:
    """The official client, unchanged, pointed at the shared server."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """The bundled SmolLM2-135M-Instruct (GGUF), as a pod would serve it."""
    server = ServeProcess("smollm2-135m", tmp_path_factory.mktemp("serve-smollm2") / "serve.log", name="smollm2-135m")
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def adapters(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random PEFT adapters of the tiny model, good and bad (rank 16, an LM-head target, another base's shapes)."""
    root = tmp_path_factory.mktemp("server-lora")
    other_base = build_shared_checkpoint(root / "gqa-base", "gqa-llama")  # 2 KV heads: k/v are half as wide
    return {
        "first": write_adapter(tiny_model_dir, root / "first", 1, r=4, target_modules=["q_proj", "v_proj"]),
        "second": write_adapter(tiny_model_dir, root / "second", 2, r=8, target_modules=["o_proj", "up_proj"]),
        "too-big": write_adapter(tiny_model_dir, root / "too-big", 3, r=16, target_modules=["q_proj"]),
        "lm-head": write_adapter(tiny_model_dir, root / "lm-head", 4, r=4, target_modules=["q_proj", "lm_head"]),
        "other-base": write_adapter(other_base, root / "other-base", 5, r=4, target_modules=["k_proj"]),
    }


@pytest.fixture(scope="session")
def lora_server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, adapters: dict[str, Path]
) -> Iterator[ServeProcess]:
    """LoRA on, one slot of rank 8, ``first`` loaded at start-up, run-time loading allowed."""
    server = ServeProcess(
        tiny_model_dir,
        tmp_path_factory.mktemp("serve-lora-log") / "serve.log",
        "--enable-lora",
        "--max-loras",
        "1",
        "--max-lora-rank",
        "8",
        "--lora-modules",
        f"first={adapters['first']}",
        "--allow-runtime-lora-updating",
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
