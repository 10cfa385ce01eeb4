"""Each kind's command line from the same settings: every field it honours becomes its own flag."""

from __future__ import annotations

import pytest

from shoal.engine_kinds import ADAPTERS, EngineSettings, UnknownEngineKind, adapter

FULL = EngineSettings(
    model="/models/m",
    served_name="m",
    port=8000,
    dtype="bfloat16",
    block_size=32,
    max_model_len=4096,
    max_num_seqs=8,
    kv_cache_bytes=2**30,
    gpus=4,
)


def flags(argv: list[str]) -> dict[str, str]:
    """``--flag value`` pairs (a flag followed by another flag maps to '')."""
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[arg] = "" if nxt.startswith("--") else nxt
    return out


def test_vllm_takes_every_field_and_shards_over_the_gpus() -> None:
    argv = ADAPTERS["vllm"].command(FULL)
    assert argv[:3] == ["vllm", "serve", "/models/m"]
    f = flags(argv)
    assert f["--served-model-name"] == "m" and f["--port"] == "8000" and f["--dtype"] == "bfloat16"
    assert f["--block-size"] == "32" and f["--max-model-len"] == "4096" and f["--max-num-seqs"] == "8"
    assert f["--kv-cache-memory-bytes"] == str(2**30) and f["--tensor-parallel-size"] == "4"


def test_sglang_names_the_same_fields_its_own_way() -> None:
    f = flags(ADAPTERS["sglang"].command(FULL))
    assert f["--model-path"] == "/models/m" and f["--page-size"] == "32" and f["--context-length"] == "4096"
    assert f["--max-running-requests"] == "8" and f["--tp-size"] == "4" and "--enable-metrics" in f
    assert "--device" not in f  # on GPUs; 0 GPUs adds --device cpu
    assert flags(ADAPTERS["sglang"].command(EngineSettings("/m", "m", 1, gpus=0)))["--device"] == "cpu"


def test_llama_server_gives_each_slot_max_model_len_and_exports_metrics() -> None:
    f = flags(ADAPTERS["llamacpp"].command(FULL))
    assert f["--parallel"] == "8" and f["--ctx-size"] == str(4096 * 8) and f["--alias"] == "m"
    assert "--metrics" in f and f["--n-gpu-layers"] == "999"


def test_unset_fields_leave_each_engine_its_own_default() -> None:
    bare = EngineSettings("/models/m", "m", 8000)
    for kind in ("vllm", "sglang", "llamacpp"):
        f = flags(ADAPTERS[kind].command(bare))
        for flag in ("--block-size", "--page-size", "--max-model-len", "--context-length", "--ctx-size"):
            assert flag not in f, (kind, flag)


def test_shoal_keeps_its_serve_command() -> None:
    f = flags(ADAPTERS["shoal"].command(EngineSettings("smollm2-135m", "s", 8000, gpus=1)))
    assert f["--block-size"] == "16" and f["--device"] == "cuda" and f["--attention-backend"] == "triton"


def test_an_unknown_kind_names_the_supported_ones() -> None:
    with pytest.raises(UnknownEngineKind, match="supported: shoal, vllm, sglang, llamacpp"):
        adapter("tgi")
