"""The offline ``LLM`` API: strings or token ids in, completions out, in the order given."""

from __future__ import annotations

from pathlib import Path

import pytest
from kv_invariants import assert_all_free
from support.devices import TEST_DEVICE

from shoal.engine import LLM, InvalidRequestError, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_qwen2_dir: Path) -> LLM:
    return LLM(
        str(tiny_qwen2_dir),
        dtype="float32",
        block_size=4,
        num_kv_blocks=64,
        max_num_batched_tokens=32,
        device=TEST_DEVICE,
    )


def test_generate_takes_strings_and_token_ids_with_params_per_prompt(llm: LLM) -> None:
    greedy = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    prompts = ["The capital of France is", [7, 8, 9, 10], "Once upon a time"]
    outputs = llm.generate(prompts, [greedy, SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True), greedy])
    assert [len(o.token_ids) for o in outputs] == [5, 3, 5]
    assert all(o.finish_reason == "length" for o in outputs)
    assert outputs[0].prompt_token_ids == llm.tokenizer.encode("The capital of France is")
    assert outputs[1].prompt_token_ids == [7, 8, 9, 10]
    (alone,) = llm.generate("The capital of France is", greedy)
    assert alone.token_ids == outputs[0].token_ids and alone.text == outputs[0].text
    (as_ids,) = llm.generate([7, 8, 9, 10], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    assert as_ids.token_ids == outputs[1].token_ids
    assert alone.text == llm.tokenizer.decode(alone.token_ids).rstrip("\ufffd")


def test_chat_renders_the_template_before_generating(llm: LLM) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    messages = [{"role": "user", "content": "Hello"}]
    (chat,) = llm.chat(messages, params)
    rendered = llm.tokenizer.apply_chat_template(messages)
    (plain,) = llm.generate([llm.tokenizer.encode(rendered, add_special_tokens=False)], params)
    assert chat.token_ids == plain.token_ids and len(chat.token_ids) == 4


def test_a_bad_prompt_fails_the_call_and_leaves_the_engine_clean(llm: LLM) -> None:
    with pytest.raises(InvalidRequestError, match="prompt"):
        llm.generate(["fine", [1] * 1000], SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished()
    assert_all_free(llm.engine.block_manager)
    (ok,) = llm.generate("fine", SamplingParams(max_tokens=2, ignore_eos=True))
    assert len(ok.token_ids) == 2


def test_kv_events_replay_to_the_snapshot(llm: LLM) -> None:
    engine = llm.engine
    engine.drain_kv_events()
    before = set(engine.kv_snapshot())
    hits_before = engine.stats().prefix_hit_tokens
    shared = list(range(20, 60))
    llm.generate([[*shared, 5], [*shared, 6]], SamplingParams(max_tokens=3, ignore_eos=True))
    events = engine.drain_kv_events()
    assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))
    held = set(before)
    for event in events:
        (held.update if event.type == "stored" else held.difference_update)(event.hashes)
    assert held == set(engine.kv_snapshot()) and held - before
    assert engine.stats().prefix_hit_tokens - hits_before == len(shared)  # the second reuses the first's blocks
