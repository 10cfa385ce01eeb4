"""Decode graphs: the buckets, and replay giving the eager path's tokens without touching a real block.

The CPU cannot record graphs, so these tests capture with ``StandInGraphs`` (``graph_stand_in.py``): everything
but the recording itself (static buffers, padding, bucket choice, copies in and out, the scratch block) is the
engine's own. The real CUDA graphs are tested in the GPU lane (``test_decode_graphs_cuda.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from graph_stand_in import StandInGraphs
from hypothesis import given
from hypothesis import strategies as st
from kv_invariants import assert_all_free
from lora_adapters import write_adapter
from support.devices import TEST_DEVICE

from shoal.engine.core import EngineConfig, EngineCore, SamplingParams
from shoal.engine.core.decode_graphs import bucket_for, capture_sizes, plan_graphs

MAX_TOKENS = 6
LARGEST = 8  # max_cudagraph_capture_size in these engines; max_num_seqs is 10, so a batch of 10 runs eagerly


def test_the_capture_sizes_climb_like_vllms_to_the_limit() -> None:
    assert capture_sizes(128, 512) == (1, 2, 4, *range(8, 129, 8))
    assert capture_sizes(12, 512) == (1, 2, 4, 8, 12)  # a full batch replays too
    assert capture_sizes(1000, 512) == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    assert capture_sizes(10, 8) == (1, 2, 4, 8)
    assert capture_sizes(1, 512) == (1,)


@given(st.integers(1, 1200), st.integers(1, 600), st.integers(1, 1300))
def test_a_batch_replays_the_smallest_size_that_holds_it_and_none_above_the_largest(
    max_num_seqs: int, limit: int, batch: int
) -> None:
    sizes = capture_sizes(max_num_seqs, limit)
    bucket = bucket_for(sizes, batch)
    if batch > sizes[-1]:
        assert bucket is None
    else:
        assert bucket is not None and bucket >= batch
        assert all(s < batch for s in sizes if s < bucket)


def test_graphs_are_planned_on_cuda_only_and_never_under_enforce_eager_or_for_experts() -> None:
    assert plan_graphs(False, True, False, 4, 512).summary().startswith("cuda graphs for decode batch sizes 1, 2, 4 (")
    assert plan_graphs(True, True, False, 4, 512).summary() == "cuda graphs off (--enforce-eager)"
    assert plan_graphs(True, False, False, 4, 512).summary() == (
        "cuda graphs off (--enforce-eager; a CPU never uses them)"
    )
    assert plan_graphs(False, False, False, 4, 512).sizes == ()
    assert plan_graphs(False, True, True, 4, 512).sizes == ()


def _engine(path: Path, graphs: StandInGraphs | None, **options: Any) -> EngineCore:
    config = EngineConfig(
        model=str(path),
        dtype="float32",
        num_kv_blocks=96,
        max_num_seqs=10,
        max_cudagraph_capture_size=LARGEST,
        enforce_eager=graphs is None,
        device=TEST_DEVICE,
        **options,
    )
    return EngineCore.from_config(config, make_graph=graphs)


def _generate(
    core: EngineCore, prompts: list[list[int]], late: list[int] | None = None, lora: str | None = None
) -> dict[str, list[int]]:
    """Greedy tokens per request; ``late`` joins after two steps, so its prefill shares a step with decodes;
    ``lora``: the adapter the first request uses."""
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        core.add_request(f"r{i}", prompt, params, lora_name=lora if i == 0 else None)
    tokens: dict[str, list[int]] = {}
    steps = 0
    while core.has_unfinished():
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
        steps += 1
        if steps == 2 and late is not None:
            core.add_request("late", late, params)
    assert_all_free(core.block_manager)
    return tokens


def _prompts(n: int, vocab: int) -> list[list[int]]:
    return [[(7 * i + 13 * j) % (vocab - 3) + 3 for j in range(5 + 3 * i)] for i in range(n)]


@pytest.fixture(scope="module", params=["tiny_gqa_llama_dir", "tiny_mistral_window_dir"])
def engines(request: pytest.FixtureRequest) -> tuple[EngineCore, EngineCore, StandInGraphs]:
    """An eager engine and one replaying stand-in graphs, on the same checkpoint (a sliding window's too)."""
    path = request.getfixturevalue(request.param)
    graphs = StandInGraphs()
    return _engine(path, None), _engine(path, graphs), graphs


@pytest.mark.parametrize("batch", [1, 3, LARGEST, 10])
def test_replayed_decodes_give_the_eager_tokens(
    engines: tuple[EngineCore, EngineCore, StandInGraphs], batch: int
) -> None:
    eager, replaying, graphs = engines
    prompts = _prompts(batch, eager.model_config.vocab_size)
    before = graphs.replays
    assert _generate(replaying, prompts) == _generate(eager, prompts)
    decode_steps = MAX_TOKENS - 1
    assert graphs.replays - before == (decode_steps if batch <= LARGEST else 0)  # 10 is above the largest


def test_a_prefill_joining_decodes_runs_eagerly_and_the_tokens_still_match(
    engines: tuple[EngineCore, EngineCore, StandInGraphs],
) -> None:
    eager, replaying, graphs = engines
    vocab = eager.model_config.vocab_size
    prompts, late = _prompts(3, vocab), _prompts(4, vocab)[3]
    before = graphs.replays
    assert _generate(replaying, prompts, late) == _generate(eager, prompts, late)
    # steps: prefill, decode (replayed), decodes + the late prefill (eager), then decodes replayed to the end
    assert 0 < graphs.replays - before < MAX_TOKENS - 1 + MAX_TOKENS - 1


def test_pad_rows_write_only_the_scratch_block(tiny_gqa_llama_dir: Path) -> None:
    core = _engine(tiny_gqa_llama_dir, StandInGraphs())
    runner = core.runner
    graphs = runner.graphs
    assert graphs is not None and graphs.scratch_block == core.block_manager.num_cache_blocks
    vocab = core.model_config.vocab_size
    _generate(core, _prompts(LARGEST, vocab))  # leaves real slots in rows 3-7, which must turn back into pads
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    for i, prompt in enumerate(_prompts(3, vocab)):
        core.add_request(f"s{i}", prompt, params)
    core.step()  # the prefills; the next step decodes 3 rows in the graph of 4
    requests = list(core.scheduler.running)
    size = core.block_manager.block_size
    slots = {r.block_ids[(r.num_tokens - 1) // size] * size + (r.num_tokens - 1) % size for r in requests}
    scratch = range(graphs.scratch_block * size, (graphs.scratch_block + 1) * size)
    for k, _ in runner.kv_caches:  # capture wrote it; cleared, so this step's pad row must show
        k[graphs.scratch_block].zero_()
    k_before = [k.clone().flatten(0, 1) for k, _ in runner.kv_caches]
    core.step()
    for layer, (k, _) in enumerate(runner.kv_caches):
        changed = set(torch.nonzero((k.flatten(0, 1) != k_before[layer]).any(-1).any(-1)).flatten().tolist())
        assert changed - slots <= set(scratch), f"layer {layer}: pad rows wrote {sorted(changed - slots)}"
        assert changed & set(scratch), f"layer {layer}: the pad row wrote nothing to the scratch block"
        assert slots <= changed


def test_a_batch_with_a_lora_row_runs_eagerly_and_a_base_batch_replays(
    tiny_gqa_llama_dir: Path, tmp_path: Path
) -> None:
    adapter = write_adapter(tiny_gqa_llama_dir, tmp_path / "all", seed=2, r=8, lora_alpha=16, target_modules=["q_proj"])
    lora = {"enable_lora": True, "max_lora_rank": 8, "lora_modules": (("all", str(adapter)),)}
    graphs = StandInGraphs()
    replaying, eager = _engine(tiny_gqa_llama_dir, graphs, **lora), _engine(tiny_gqa_llama_dir, None, **lora)
    prompts = _prompts(3, eager.model_config.vocab_size)
    assert _generate(replaying, prompts, lora="all") == _generate(eager, prompts, lora="all")
    assert graphs.replays == 0  # the adapter's row was in every decode step
    assert _generate(replaying, prompts) == _generate(eager, prompts)
    assert graphs.replays == MAX_TOKENS - 1


def test_the_plan_lists_the_sizes_and_the_start_up_line_times_the_capture(
    tiny_gqa_llama_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    graphs = StandInGraphs()
    with caplog.at_level("INFO", logger="shoal.engine.core"):
        _engine(tiny_gqa_llama_dir, graphs)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("shoal.engine.core")]
    plan = next(m for m in messages if m.startswith("start-up plan:"))
    assert "\n  cuda graphs for decode batch sizes 1, 2, 4, 8 (captured before ready;" in plan
    phases = next(m for m in messages if m.startswith("start-up took"))
    assert phases.split(", ")[-1].startswith("capturing ") and "warming" in phases
    assert len(graphs.made) == 4 and all(g.forward is not None for g in graphs.made)
