"""Every decoder layer in one C call (``DecodeStack``): the module path's logits and KV cache to the bit, for the
batches and models it takes, and the module path for the rest."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from shoal.engine import LLM, SamplingParams
from shoal.engine.model import CausalLM
from shoal.engine.model.decode_stack import DecodeStack
from shoal.kernels import AttentionMetadata

BLOCK = 16


def _llm(path: Path, dtype: str = "float32", **options: object) -> LLM:
    return LLM(str(path), dtype=dtype, quantization="int4", device="cpu", max_num_seqs=16, **options)


def _model(llm: LLM) -> CausalLM:
    model = llm.engine.runner.model
    assert isinstance(model, CausalLM)
    return model


def _batch(query_lens: list[int], contexts: list[int]) -> tuple[AttentionMetadata, torch.Tensor, torch.Tensor]:
    """Sequences with ``contexts[s]`` tokens cached before this step's ``query_lens[s]``, each in its own blocks."""
    seq_lens = [c + q for c, q in zip(contexts, query_lens, strict=True)]
    tables, next_block = [], 1
    for n in seq_lens:
        blocks = -(-n // BLOCK)
        tables.append(list(range(next_block, next_block + blocks)))
        next_block += blocks
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK)
    positions = torch.cat([torch.arange(c, c + q) for c, q in zip(contexts, query_lens, strict=True)])
    ids = torch.randint(0, 300, (int(sum(query_lens)),), generator=torch.Generator().manual_seed(sum(seq_lens)))
    return meta, positions, ids


def _forward(model: CausalLM, stack: Callable[..., Any] | None, caches: list, batch: tuple) -> torch.Tensor:
    meta, positions, ids = batch
    model.decode_stack = stack  # type: ignore[assignment]
    rows = torch.arange(ids.shape[0])
    with torch.inference_mode():
        return model(ids, positions, caches, meta, rows)


def _random_caches(model: CausalLM, llm: LLM) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The engine's cache shapes, filled with noise so that attention reads real context."""
    generator = torch.Generator().manual_seed(0)
    return [
        tuple(torch.randn(t.shape, generator=generator).to(t.dtype) for t in pair)  # type: ignore[misc]
        for pair in llm.engine.runner.kv_caches
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "family", ["tiny_gqa_llama_dir", "tiny_mistral_window_dir", "tiny_phi3_dir", "tiny_qwen2_dir", "tiny_qwen3_dir"]
)
def test_one_call_gives_the_module_paths_logits_and_cache_to_the_bit(
    family: str, dtype: str, request: pytest.FixtureRequest
) -> None:
    llm = _llm(request.getfixturevalue(family), dtype)
    model = _model(llm)
    stack = model.decode_stack
    # fp32 beside the C kernel takes up to 16 rows quantized (the kernel's passes of 8), bf16 up to 8
    assert stack is not None and stack.max_rows == (16 if dtype == "float32" else 8)
    batches = [
        ([1], [37]),  # batch-1 decode
        ([1, 1, 1, 1, 1], [3, 40, 17, 64, 1]),  # decodes of several lengths (Mistral's window of 6 cuts the long ones)
        ([5, 1, 1], [0, 22, 9]),  # a prefill chunk among decodes: 7 rows
        ([stack.max_rows], [30]),  # a chunk of exactly the quantized rows
    ]
    if dtype == "float32":
        batches.append(([1] * 13, list(range(2, 67, 5))))  # 13 decodes: a pass of 8 and one of 5
    for query_lens, contexts in batches:
        batch = _batch(query_lens, contexts)
        base = _random_caches(model, llm)
        mine, theirs = [(k.clone(), v.clone()) for k, v in base], [(k.clone(), v.clone()) for k, v in base]
        calls: list[object] = []

        def counted(*args: Any, stack: DecodeStack = stack, calls: list[object] = calls) -> Any:
            calls.append(result := stack(*args))
            return result

        one_call = _forward(model, counted, mine, batch)
        modules = _forward(model, None, theirs, batch)
        assert calls and calls[0] is not None, "the stack ran this batch"
        assert torch.equal(one_call, modules), (query_lens, (one_call - modules).abs().max())
        for (k1, v1), (k2, v2) in zip(mine, theirs, strict=True):
            assert torch.equal(k1, k2) and torch.equal(v1, v2)
    model.decode_stack = stack


def test_more_rows_than_the_quantized_weights_take_run_the_modules(tiny_gqa_llama_dir: Path) -> None:
    llm = _llm(tiny_gqa_llama_dir)
    model = _model(llm)
    stack = model.decode_stack
    assert stack is not None
    rows = stack.max_rows + 1
    meta, positions, _ = _batch([1] * rows, [5] * rows)
    hidden = torch.zeros(rows, 64)
    assert stack(positions, hidden, llm.engine.runner.kv_caches, meta) is None


def test_served_tokens_and_logprobs_match_the_module_path(tiny_gqa_llama_dir: Path) -> None:
    """Through the engine: prefills, decodes of a changing batch, and batches of 16 decodes (fp32's most quantized
    rows, in the kernel's passes of 8) with prefill chunks beside them (more: the modules' rows). No prefix caching:
    a later run's cached prompt blocks would change its steps' rows, and so which weights (quantized or dense)
    computed them."""
    llm = _llm(tiny_gqa_llama_dir, enable_prefix_caching=False)
    model = _model(llm)
    stack = model.decode_stack
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True, logprobs=3)
    prompts = [f"story number {i}: once" for i in range(20)]

    def run() -> list[tuple[list[int], list]]:
        outputs = llm.generate(prompts[:3], params) + llm.generate(prompts, params)
        return [(o.token_ids, o.logprobs) for o in outputs]

    with_stack = run()
    model.decode_stack = None
    assert run() == with_stack
    model.decode_stack = stack


def test_a_refused_call_names_the_layer_and_the_op(tiny_gqa_llama_dir: Path) -> None:
    llm = _llm(tiny_gqa_llama_dir)
    stack = _model(llm).decode_stack
    assert stack is not None
    meta, _, _ = _batch([1], [5])
    past_the_table = torch.tensor([10**6])
    with pytest.raises(ValueError, match=r"decoder layer 0: rotary_write_kv: .*a position outside the RoPE table"):
        stack(past_the_table, torch.zeros(1, 64), llm.engine.runner.kv_caches, meta)


def test_kv_caches_of_different_shapes_are_refused(tiny_gqa_llama_dir: Path) -> None:
    """The table addresses every layer's cache with one shape: a cache of another shape is an error, not a read
    past its end."""
    llm = _llm(tiny_gqa_llama_dir)
    stack = _model(llm).decode_stack
    assert stack is not None
    caches = list(llm.engine.runner.kv_caches)
    k_cache, v_cache = caches[-1]
    caches[-1] = (k_cache, v_cache[:-1].clone())  # one block fewer in the last layer's values
    meta, positions, _ = _batch([1], [5])
    with pytest.raises(ValueError, match="of one shape"):
        stack(positions, torch.zeros(1, 64), caches, meta)


@pytest.mark.parametrize(
    ("family", "options", "why"),
    [
        ("tiny_mixtral_dir", {}, "a sparse MLP"),
        ("tiny_gqa_llama_dir", {"enable_lora": True}, "LoRA wraps the projections"),
    ],
)
def test_models_the_one_call_does_not_cover_keep_the_modules(
    family: str, options: dict[str, object], why: str, request: pytest.FixtureRequest
) -> None:
    llm = _llm(request.getfixturevalue(family), **options)
    assert _model(llm).decode_stack is None, why
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    assert len(llm.generate(["hello"], params)[0].token_ids) == 4


def test_unquantized_weights_keep_the_modules(tiny_gqa_llama_dir: Path) -> None:
    llm = LLM(str(tiny_gqa_llama_dir), dtype="float32", device="cpu", quantization="none")
    assert _model(llm).decode_stack is None


def test_a_step_makes_one_c_call_for_all_its_layers_where_the_modules_make_nine_a_layer() -> None:
    """Counted by ``bench/decode_ops.py`` on its tiny Llama (3 layers) with int4 projections."""
    script = Path(__file__).resolve().parents[2] / "bench" / "decode_ops.py"
    spec = importlib.util.spec_from_file_location("bench_decode_ops_stack", script)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)

    one_call = bench.count_step_ops("cpu", layers=3, batch=2, steps=2, quantization="int4")
    assert one_call["one_call_layers"] and one_call["layer_ops"] == {"c shoal_decode_layers": pytest.approx(1 / 3)}
    modules = bench.count_step_ops("cpu", layers=3, batch=2, steps=2, quantization="int4", one_call=False)
    assert not modules["one_call_layers"] and modules["per_layer"]["c"] == 9
    assert modules["layer_ops"]["c shoal_gemv"] == 4
    assert one_call["launches_per_step"] < modules["launches_per_step"] - 3 * 8
