"""The start-up plan: decided in one place, logged as one block, and the warm-up it plans sized to the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.devices import TEST_DEVICE

from shoal.engine import LLM
from shoal.engine.core.kv_budget import KvBudget
from shoal.engine.core.warm_up import CPU_PREFILL_TOKENS, decode_lengths, plan_warm_up


def test_the_plan_is_one_block_then_its_warnings_then_one_line_of_phases(
    tiny_llama_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="shoal.engine.core"):
        LLM(str(tiny_llama_dir), dtype="float32", num_kv_blocks=8, block_size=16, device=TEST_DEVICE)
    records = [r for r in caplog.records if r.name.startswith("shoal.engine.core")]
    plan, warning, phases = records[0].getMessage(), records[1].getMessage(), records[2].getMessage()
    lines = plan.splitlines()
    assert lines[0] == "start-up plan:"
    assert [line.split()[0] for line in lines[1:]] == [
        "device",
        "dtype",
        "quantization",
        "kv",
        "warm-up:",
        "cuda",
        "weights:",
    ]
    assert lines[2] == "  dtype float32 (asked for (--dtype))"
    assert lines[4].startswith("  kv cache 8 blocks of 16 tokens = 128 tokens") and "max_model_len 128" in lines[4]
    assert lines[5] == "  warm-up: a prefill of 127 tokens, decode steps at batch sizes 1, 2, 4, 8"
    assert lines[6] == "  cuda graphs off (a CPU runs every step eagerly: graphs are CUDA's)"
    assert lines[7] == "  weights: converted cache off"
    assert records[1].levelname == "WARNING"
    assert warning.startswith("max_model_len cut from the model's context length 256 to the 128 tokens")
    assert phases.startswith("start-up took ")
    assert [part.split()[0] for part in phases.split(": ", 1)[1].split(", ")] == ["loading", "profiling", "warming"]


def budget(num_blocks: int, max_model_len: int, block_size: int = 16) -> KvBudget:
    return KvBudget(num_blocks, block_size, 0, max_model_len, "test")


def test_the_warm_up_prefill_is_the_largest_chunk_a_step_and_the_cache_allow() -> None:
    assert plan_warm_up(2048, 128, budget(1000, 8192)).prefill_tokens == 2048  # the step's budget
    assert plan_warm_up(2048, 128, budget(1000, 300)).prefill_tokens == 299  # a request's, the prompt < max_model_len
    assert plan_warm_up(2048, 128, budget(10, 160)).prefill_tokens == 159  # the cache's 160 tokens, one to generate
    assert plan_warm_up(2048, 128, budget(1000, 8192), "cpu").prefill_tokens == CPU_PREFILL_TOKENS  # nothing compiles
    assert plan_warm_up(100, 128, budget(1000, 8192), "cpu").prefill_tokens == 100


def test_the_decode_sizes_are_the_small_batches_and_the_largest_allowed() -> None:
    assert plan_warm_up(2048, 128, budget(1000, 8192)).decode_batch_sizes == (1, 2, 4, 8, 128)
    assert plan_warm_up(2048, 6, budget(1000, 8192)).decode_batch_sizes == (1, 2, 4, 6)  # max_num_seqs
    assert plan_warm_up(2048, 128, budget(40, 640)).decode_batch_sizes == (1, 2, 4, 8, 40)  # one block each
    assert plan_warm_up(2048, 128, budget(40, 640, block_size=4)).decode_batch_sizes == (1, 2, 4, 8, 20)
    assert plan_warm_up(3, 128, budget(1000, 8192)).decode_batch_sizes == (1, 2, 3)  # the step's token budget


@pytest.mark.parametrize("sizes", [(1, 2, 4, 8, 128), (1, 2, 3), (1,), ()])
def test_each_decode_step_of_the_group_runs_the_next_size_down(sizes: tuple[int, ...]) -> None:
    lengths = decode_lengths(sizes)
    assert len(lengths) == max(sizes, default=0)
    # decode step k (after the prompts' step) runs the requests that generate more than k tokens
    batches = [sum(1 for n in lengths if n > k) for k in range(1, max(lengths, default=1))]
    assert batches == sorted(sizes, reverse=True)
