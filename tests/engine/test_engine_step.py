"""``EngineCore.step()`` with a stand-in for the model: chunked prefill, finishing, aborts and preemption.

``EngineCore`` takes its parts ready-made, so here its runner is a fake (named as such: no model runs) that
answers each batch the way ``ModelRunner`` does, one token per request whose chunk reaches the end of what it
knows, with the token a pure function of the request's tokens so far. Everything else is the real engine: the
scheduler, the block manager, the detokenizer (a real byte-level BPE tokenizer), the stop checks.
"""

from __future__ import annotations

import pytest
import torch
from kv_invariants import assert_all_free
from support.devices import TEST_DEVICE
from tiny_checkpoints import save_tokenizer, train_tokenizer

from shoal.engine.core import EngineConfig, EngineCore, RequestOutput, SamplingParams
from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.outputs import SampleLogprobs
from shoal.engine.core.sampler import Sampler
from shoal.engine.core.scheduler import Scheduler, SchedulerOutput
from shoal.engine.core.startup_plan import HardwarePlan
from shoal.engine.model_config import ModelConfig
from shoal.tokenizer import Tokenizer

FIRST_ORDINARY_ID = 3  # 0-2 are the tokenizer's special tokens
EOS = 2


class FakeRunner:
    """Stands in for ``ModelRunner``: the next token is a hash of the tokens so far, or EOS when told."""

    def __init__(self, vocab_size: int, eos_after: dict[str, int] | None = None) -> None:
        self.vocab_size = vocab_size
        self.eos_after = eos_after or {}  # request id -> output tokens after which it says EOS
        self.batches: list[dict[str, int]] = []
        self.preempted: list[str] = []

    def execute(self, batch: SchedulerOutput) -> tuple[dict[str, int], dict[str, SampleLogprobs]]:
        self.batches.append(dict(batch.num_scheduled_tokens))
        self.preempted += [request.request_id for request in batch.preempted]
        tokens = {}
        for request in batch.scheduled:
            end = request.num_computed_tokens + batch.num_scheduled_tokens[request.request_id]
            if end < request.num_tokens:
                continue  # a prefill chunk short of the prompt's end samples nothing
            if self.eos_after.get(request.request_id) == request.num_output_tokens:
                tokens[request.request_id] = EOS
            else:
                span = self.vocab_size - FIRST_ORDINARY_ID
                tokens[request.request_id] = FIRST_ORDINARY_ID + hash(tuple(request.all_token_ids)) % span
        return tokens, {}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    directory = tmp_path_factory.mktemp("tokenizer")
    save_tokenizer(train_tokenizer(vocab_size=384), directory)
    return Tokenizer.from_hf_dir(directory)


def build_engine(
    tokenizer: Tokenizer,
    runner: FakeRunner,
    *,
    num_blocks: int = 64,
    block_size: int = 4,
    budget: int = 64,
    max_num_seqs: int = 8,
) -> EngineCore:
    config = EngineConfig(
        model="stand-in",
        block_size=block_size,
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        num_kv_blocks=num_blocks,
        device=TEST_DEVICE,
    )
    model_config = ModelConfig(
        architecture="llama",
        hidden_size=8,
        intermediate_size=8,
        num_layers=1,
        num_heads=1,
        num_kv_heads=1,
        head_dim=8,
        vocab_size=runner.vocab_size,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        max_position_embeddings=256,
        eos_token_ids=(EOS,),
    )
    plan = HardwarePlan(device="cpu", dtype=torch.float32, quantization="none", where="a fake runner", choices={})
    blocks = BlockManager(num_blocks, block_size, enable_prefix_caching=True)
    return EngineCore(
        config,
        model_name="stand-in",
        tokenizer=tokenizer,
        model_config=model_config,
        plan=plan,
        max_model_len=min(256, num_blocks * block_size),
        scheduler=Scheduler(blocks, budget, max_num_seqs),
        sampler=Sampler([EOS]),
        runner=runner,
    )


def drain(engine: EngineCore) -> dict[str, list[RequestOutput]]:
    outputs: dict[str, list[RequestOutput]] = {}
    while engine.has_unfinished():
        for out in engine.step():
            outputs.setdefault(out.request_id, []).append(out)
    assert_all_free(engine.block_manager)
    return outputs


def tokens_of(outputs: list[RequestOutput]) -> list[int]:
    return [t for out in outputs for t in out.new_token_ids]


def prompt(seed: int, length: int) -> list[int]:
    return [FIRST_ORDINARY_ID + (seed * 37 + i * 11) % 300 for i in range(length)]


def test_a_long_prompt_is_prefilled_in_chunks_and_answers_only_at_its_end(tokenizer: Tokenizer) -> None:
    runner = FakeRunner(tokenizer.vocab_size)
    engine = build_engine(tokenizer, runner, budget=8)
    engine.add_request("long", prompt(1, 20), SamplingParams(max_tokens=3, ignore_eos=True))
    first_steps = [engine.step() for _ in range(3)]
    assert [b["long"] for b in runner.batches] == [8, 8, 4]
    assert first_steps[0] == first_steps[1] == []  # nothing to say while the prompt is half read
    assert len(first_steps[2]) == 1 and len(first_steps[2][0].new_token_ids) == 1
    rest = drain(engine)["long"]
    assert [b["long"] for b in runner.batches[3:]] == [1, 1]  # then one token per decode step
    assert rest[-1].finished and rest[-1].finish_reason == "length" and rest[-1].num_output_tokens == 3


def test_decodes_share_the_budget_with_a_prefill_chunk(tokenizer: Tokenizer) -> None:
    runner = FakeRunner(tokenizer.vocab_size)
    engine = build_engine(tokenizer, runner, budget=6)
    engine.add_request("short", prompt(2, 3), SamplingParams(max_tokens=4, ignore_eos=True))
    engine.step()
    engine.add_request("long", prompt(3, 12), SamplingParams(max_tokens=1, ignore_eos=True))
    engine.step()
    assert runner.batches[1] == {"short": 1, "long": 5}  # the running decode first, the rest of the budget after
    drain(engine)


def test_requests_finish_for_length_eos_and_stop_tokens_and_free_their_blocks(tokenizer: Tokenizer) -> None:
    runner = FakeRunner(tokenizer.vocab_size, eos_after={"eos": 2})
    engine = build_engine(tokenizer, runner)
    engine.add_request("length", prompt(4, 5), SamplingParams(max_tokens=4, ignore_eos=True))
    engine.add_request("eos", prompt(5, 5), SamplingParams(max_tokens=10))
    reference = FakeRunner(tokenizer.vocab_size)
    probe = build_engine(tokenizer, reference)
    probe.add_request("probe", prompt(6, 5), SamplingParams(max_tokens=3, ignore_eos=True))
    third = tokens_of(drain(probe)["probe"])[2]
    engine.add_request("stop", prompt(6, 5), SamplingParams(max_tokens=10, stop_token_ids=[third]))
    outputs = drain(engine)
    assert (outputs["length"][-1].finish_reason, len(tokens_of(outputs["length"]))) == ("length", 4)
    assert outputs["eos"][-1].finish_reason == "stop" and tokens_of(outputs["eos"])[-1] == EOS
    assert len(tokens_of(outputs["eos"])) == 3
    assert outputs["stop"][-1].finish_reason == "stop" and outputs["stop"][-1].stop_reason == third
    assert engine.stats().finished_by_reason == {"length": 1, "stop": 2}


def test_abort_frees_at_once_reports_abort_next_step_and_spares_the_others(tokenizer: Tokenizer) -> None:
    alone = build_engine(tokenizer, FakeRunner(tokenizer.vocab_size))
    alone.add_request("keep", prompt(7, 6), SamplingParams(max_tokens=5, ignore_eos=True))
    expected = tokens_of(drain(alone)["keep"])

    engine = build_engine(tokenizer, FakeRunner(tokenizer.vocab_size), max_num_seqs=2)
    engine.add_request("keep", prompt(7, 6), SamplingParams(max_tokens=5, ignore_eos=True))
    engine.add_request("running", prompt(8, 9), SamplingParams(max_tokens=50, ignore_eos=True))
    engine.add_request("waiting", prompt(9, 4), SamplingParams(max_tokens=50, ignore_eos=True))
    first = engine.step()
    assert engine.scheduler.num_running == 2 and engine.scheduler.num_waiting == 1
    used = engine.block_manager.num_free_blocks
    engine.abort(["running", "waiting", "never-added"])
    assert engine.block_manager.num_free_blocks > used
    assert engine.scheduler.num_running == 1 and engine.scheduler.num_waiting == 0
    outputs = drain(engine)
    assert outputs["running"] == [outputs["running"][0]] and outputs["running"][0].finish_reason == "abort"
    assert outputs["waiting"][0].finish_reason == "abort" and outputs["waiting"][0].new_token_ids == []
    kept = [out for out in first if out.request_id == "keep"] + outputs["keep"]
    assert tokens_of(kept) == expected
    assert engine.stats().finished_by_reason == {"abort": 2, "length": 1}


def test_preemption_recomputes_the_later_arrival_and_changes_no_token(tokenizer: Tokenizer) -> None:
    requests = {"early": prompt(10, 7), "late": prompt(11, 7)}
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    roomy = build_engine(tokenizer, FakeRunner(tokenizer.vocab_size), num_blocks=64)
    runner = FakeRunner(tokenizer.vocab_size)
    tight = build_engine(tokenizer, runner, num_blocks=8)  # 32 slots for 2 x 19 tokens
    for engine in (roomy, tight):
        for request_id, token_ids in requests.items():
            engine.add_request(request_id, token_ids, params)
    expected = {rid: tokens_of(outs) for rid, outs in drain(roomy).items()}
    outputs = drain(tight)
    assert runner.preempted and set(runner.preempted) == {"late"}
    assert tight.stats().num_preemptions == len(runner.preempted)
    assert {rid: tokens_of(outs) for rid, outs in outputs.items()} == expected
    assert all(outs[-1].finish_reason == "length" for outs in outputs.values())


def test_a_waiting_request_of_higher_priority_runs_first(tokenizer: Tokenizer) -> None:
    engine = build_engine(tokenizer, FakeRunner(tokenizer.vocab_size), max_num_seqs=1)
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    engine.add_request("first-come", prompt(12, 4), params, priority=1)
    engine.add_request("urgent", prompt(13, 4), params, priority=0)
    engine.add_request("second-come", prompt(14, 4), params, priority=1)
    finished: list[str] = []
    while engine.has_unfinished():
        finished += [out.request_id for out in engine.step() if out.finished]
    assert finished == ["urgent", "first-come", "second-come"]
