"""The converted-weights cache (``--weights-cache-dir``): a hit gives the very tensors a fresh conversion gives,
and whatever is wrong with the directory or an entry costs a conversion, never a start."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import resource
import signal
import threading
from pathlib import Path

import pytest
import torch
from tiny_checkpoints import write_llama_gguf

from shoal.cpu_features import cpu_info
from shoal.engine import LLM, SamplingParams
from shoal.engine.loader import WeightsCache, load_model
from shoal.engine.loader import converted_cache as cache_module
from shoal.engine.loader.converted_cache import DATA, INDEX
from shoal.engine.model import Model
from shoal.engine.model.packed_linear import onednn_bf16
from shoal.kernels import TorchOps, get_ops
from shoal.model_registry import ModelSource, resolve_model

LOGGER = "shoal.engine.loader.converted_cache"


@pytest.fixture(scope="module")
def tiny_q4(tiny_gqa_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelSource:
    """The tiny GQA Llama as a Q4_1 GGUF: quantized layers from the file's codes, a tied LM head."""
    path = write_llama_gguf(tiny_gqa_llama_dir, tmp_path_factory.mktemp("q4") / "tiny.gguf", quantize="Q4_1")
    return resolve_model(str(path))


def loaded(source: ModelSource, cache: WeightsCache | None, dtype: torch.dtype = torch.bfloat16) -> Model:
    """The model as an engine on this CPU loads it: int4, oneDNN-packed in bf16, in huge pages."""
    return load_model(source, dtype, get_ops(None, "cpu"), "cpu", "int4", cache)


def tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor the model runs with: parameters, buffers, and oneDNN-packed weights (as plain tensors)."""
    found = {f"param {n}": t for n, t in model.named_parameters()} | {
        f"buffer {n}": t for n, t in model.named_buffers()
    }
    for name, module in model.named_modules():
        for attribute, value in vars(module).items():
            if isinstance(value, torch.Tensor) and value.is_mkldnn:
                found[f"packed {name}.{attribute}"] = value.to_dense()
    return found


def assert_same(model: Model, reference: Model) -> None:
    got, want = tensors(model), tensors(reference)
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    kinds = {n: getattr(m, "kind", None) for n, m in model.named_modules()}
    assert kinds == {n: getattr(m, "kind", None) for n, m in reference.named_modules()}


def entries(root: Path) -> list[Path]:
    return sorted(root.iterdir()) if root.exists() else []


def test_smollm2_from_the_cache_is_the_fresh_conversion_tensor_for_tensor(
    smollm2_source: ModelSource, tmp_path: Path
) -> None:
    reference = loaded(smollm2_source, None)
    assert any(name.startswith("packed") for name in tensors(reference)) == onednn_bf16()
    miss = WeightsCache(tmp_path)
    assert_same(loaded(smollm2_source, miss), reference)
    (entry,) = entries(tmp_path)
    assert miss.outcome == f"converted cache miss, written ({entry})"
    hit = WeightsCache(tmp_path)
    assert_same(loaded(smollm2_source, hit), reference)
    assert hit.outcome == f"converted cache hit ({entry})"


def test_a_miss_writes_one_whole_entry_and_leaves_nothing_else(tiny_q4: ModelSource, tmp_path: Path) -> None:
    loaded(tiny_q4, WeightsCache(tmp_path))
    (entry,) = entries(tmp_path)  # no staging directory left behind
    assert entry.name.startswith("tiny-")
    index = json.loads((entry / INDEX).read_text())
    assert index["size"] == (entry / DATA).stat().st_size
    names = {r["name"] for r in index["state"]}
    assert {"embed_tokens.weight", "lm_head.weight", "layers.0.self_attn.qkv_proj.weight"} <= names
    tied = {r["name"]: r["offset"] for r in index["state"]}
    assert tied["lm_head.weight"] == tied["embed_tokens.weight"]  # written once
    assert {q["kind"] for q in index["quantized"].values()} <= {"q4_1", "int4"} and index["quantized"]


def test_greedy_tokens_from_a_cached_start_equal_a_converted_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    params = SamplingParams(max_tokens=12, temperature=0.0)
    prompt = "The capital of France is"
    outcomes = []
    tokens = []
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="shoal.engine.core"):
            llm = LLM(
                "smollm2-135m",
                max_model_len=128,
                num_kv_blocks=16,
                max_num_seqs=1,
                max_num_batched_tokens=32,
                weights_cache_dir=str(tmp_path),
            )
        tokens.append(llm.generate([prompt], params)[0].token_ids)
        plan = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up plan"))
        outcomes.append(next(line.strip() for line in plan.splitlines() if line.strip().startswith("weights:")))
        del llm
    (entry,) = entries(tmp_path)
    assert outcomes == [f"weights: converted cache miss, written ({entry})", f"weights: converted cache hit ({entry})"]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 12


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda e: os.truncate(e / DATA, (e / DATA).stat().st_size // 2), id="truncated-data"),
        pytest.param(lambda e: (e / INDEX).write_text('{"format": 1, "size": '), id="index-not-json"),
        pytest.param(lambda e: _edit_index(e, lambda i: i["state"][0].update(offset=i["size"])), id="past-the-end"),
        pytest.param(lambda e: _edit_index(e, lambda i: i["state"][0].update(name="no.such")), id="unknown-name"),
        pytest.param(
            lambda e: _edit_index(e, lambda i: i.update(quantized={"norm": i["quantized"].popitem()[1]})),
            id="not-a-projection",
        ),
    ],
)
def test_an_unusable_entry_is_logged_once_converted_again_and_rewritten(
    damage, tiny_q4: ModelSource, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reference = loaded(tiny_q4, None)
    loaded(tiny_q4, WeightsCache(tmp_path))
    (entry,) = entries(tmp_path)
    whole = (entry / DATA).read_bytes()
    damage(entry)
    cache = WeightsCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert_same(loaded(tiny_q4, cache), reference)
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(logged) == 1 and str(entry) in logged[0] and "converting from the source" in logged[0]
    assert cache.outcome == f"converted cache miss, written ({entry})"
    assert entries(tmp_path) == [entry] and (entry / DATA).read_bytes() == whole
    again = WeightsCache(tmp_path)
    assert_same(loaded(tiny_q4, again), reference)
    assert again.outcome == f"converted cache hit ({entry})"


def _edit_index(entry: Path, change) -> None:  # type: ignore[no-untyped-def]
    index = json.loads((entry / INDEX).read_text())
    change(index)
    (entry / INDEX).write_text(json.dumps(index))


def test_a_directory_that_cannot_be_made_serves_without_the_cache(
    tiny_q4: ModelSource, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = WeightsCache(blocker / "cache")  # mkdir fails, even for root, as a read-only mount's would
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert_same(loaded(tiny_q4, cache), loaded(tiny_q4, None))
    (logged,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "cannot be written" in logged and "serving without it" in logged
    assert cache.outcome.startswith("converted cache miss, not written")


def test_a_full_disk_leaves_no_partial_entry(tiny_q4: ModelSource, tmp_path: Path) -> None:
    """Stand-in for a full disk: a file size limit (RLIMIT_FSIZE) makes the data file's write fail part way."""
    reference = loaded(tiny_q4, None)
    cache = WeightsCache(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        model = loaded(tiny_q4, cache)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert_same(model, reference)
    assert cache.outcome.startswith("converted cache miss, not written")
    assert entries(tmp_path) == []  # neither an entry nor its staging directory


def test_a_changed_source_is_a_new_key(tiny_q4: ModelSource, tmp_path: Path) -> None:
    cache = WeightsCache(tmp_path)
    before = cache.entry("tiny", [tiny_q4.path], dtype="bf16")
    stat = tiny_q4.path.stat()
    os.utime(tiny_q4.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    try:
        touched = cache.entry("tiny", [tiny_q4.path], dtype="bf16")
    finally:
        os.utime(tiny_q4.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert touched != before
    assert cache.entry("tiny", [tiny_q4.path], dtype="bf16") == before
    assert cache.entry("tiny", [tiny_q4.path], dtype="fp32") != before


def test_another_cpu_never_reads_this_ones_entry(
    tiny_q4: ModelSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = WeightsCache(tmp_path).entry("tiny", [tiny_q4.path], dtype="bf16")
    other = dataclasses.replace(cpu_info(), flags=cpu_info().flags ^ {"amx_bf16", "avx512_bf16"})
    monkeypatch.setattr(cache_module, "cpu_info", lambda: other)
    assert WeightsCache(tmp_path).entry("tiny", [tiny_q4.path], dtype="bf16") != here


def test_two_engines_writing_at_once_leave_one_whole_entry(tiny_q4: ModelSource, tmp_path: Path) -> None:
    reference = loaded(tiny_q4, None, torch.float32)
    models: list[Model] = []
    threads = [
        threading.Thread(target=lambda: models.append(loaded(tiny_q4, WeightsCache(tmp_path), torch.float32)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(models) == 2
    (entry,) = entries(tmp_path)
    hit = WeightsCache(tmp_path)
    assert_same(loaded(tiny_q4, hit, torch.float32), reference)
    assert hit.outcome == f"converted cache hit ({entry})"


def test_a_safetensors_directory_is_cached_too(tiny_llama_dir: Path, tmp_path: Path) -> None:
    source = resolve_model(str(tiny_llama_dir))
    reference = load_model(source, torch.float32, TorchOps())
    load_model(source, torch.float32, TorchOps(), weights_cache=WeightsCache(tmp_path))
    hit = WeightsCache(tmp_path)
    assert_same(load_model(source, torch.float32, TorchOps(), weights_cache=hit), reference)
    assert hit.outcome.startswith("converted cache hit")
