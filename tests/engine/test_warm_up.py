"""Warm-up before ready: the planned forwards run through the real engine and leave no trace behind."""

from __future__ import annotations

from pathlib import Path

from kv_invariants import assert_all_free, assert_consistent
from support.devices import TEST_DEVICE

from shoal.engine import LLM, SamplingParams
from shoal.engine.core.engine_core import BatchRunner
from shoal.engine.core.outputs import SampleLogprobs
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.engine.core.warm_up import WarmUp, run_warm_up


class Recording:
    """The engine's real runner, noting each batch's rows and tokens before running it."""

    def __init__(self, runner: BatchRunner) -> None:
        self.runner = runner
        self.batches: list[tuple[int, int]] = []

    def execute(self, batch: SchedulerOutput) -> tuple[dict[str, int], dict[str, SampleLogprobs]]:
        self.batches.append((len(batch.scheduled), batch.total_num_scheduled_tokens))
        return self.runner.execute(batch)


def test_warm_up_runs_its_batches_and_leaves_the_cache_and_counters_as_they_were(tiny_llama_dir: Path) -> None:
    llm = LLM(
        str(tiny_llama_dir), dtype="float32", num_kv_blocks=64, max_num_seqs=16, device=TEST_DEVICE
    )  # warmed once already
    engine = llm.engine
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompt = list(range(3, 40))
    before = llm.generate([prompt], greedy)[0].token_ids
    engine.clear_counters()
    engine.drain_kv_events()
    cached = engine.kv_snapshot()
    assert cached  # the prompt's full blocks are in the prefix cache
    recording = Recording(engine.runner)
    engine.runner = recording
    run_warm_up(engine, WarmUp(prefill_tokens=100, decode_batch_sizes=(1, 2, 4, 16)))
    # the prefill alone, then 16 one-token prompts, then decode steps of 16, 4, 2 and 1
    assert recording.batches == [(1, 100), (16, 16), (16, 16), (4, 4), (2, 2), (1, 1)]
    blocks = engine.block_manager
    assert_all_free(blocks)
    assert_consistent(blocks, [])
    assert blocks.enable_prefix_caching
    assert engine.kv_snapshot() == cached and engine.drain_kv_events() == []  # nothing named, nothing evicted
    stats = engine.stats()
    assert (stats.prompt_tokens, stats.generation_tokens, stats.finished_by_reason) == (0, 0, {})
    assert (stats.prefix_queried_tokens, stats.num_preemptions) == (0, 0)
    after = llm.generate([prompt], greedy)
    assert after[0].token_ids == before and after[0].num_cached_tokens == 32  # the cache still serves its prefix


def test_a_fresh_engine_starts_with_every_block_free_and_nothing_cached(tiny_llama_dir: Path) -> None:
    engine = LLM(str(tiny_llama_dir), dtype="float32", num_kv_blocks=64, device=TEST_DEVICE).engine
    assert_all_free(engine.block_manager)
    assert engine.block_manager.num_free_blocks == 64 and engine.block_manager.cached == {}
    assert engine.kv_snapshot() == [] and engine.drain_kv_events() == []
    assert engine.stats().generation_tokens == 0
