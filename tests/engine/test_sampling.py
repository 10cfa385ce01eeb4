"""Sampling: filters against plain references, penalties, seeds, stops, min_tokens, ignore_eos, logprobs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kv_invariants import assert_all_free
from support.devices import TEST_DEVICE

from shoal.engine.core import EngineConfig, EngineCore, SamplingParams
from shoal.engine.core.request import Request, RequestStatus
from shoal.engine.core.sampler import (
    Sampler,
    apply_min_p,
    apply_penalties,
    apply_top_k_top_p,
    row_argmax,
    row_argmax_ids,
)
from shoal.engine.core.stop_checker import token_stop

VOCAB = 50


def _request(request_id: str, params: SamplingParams, prompt: list[int] | None = None) -> Request:
    return Request(request_id, prompt or [1, 2, 3], params, arrival_time=0.0)


def _kept(logits: torch.Tensor) -> list[set[int]]:
    return [set(torch.nonzero(row > float("-inf")).flatten().tolist()) for row in logits]


def test_top_k_and_top_p_keep_what_a_plain_reference_keeps() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, VOCAB) * 3
    top_k = torch.tensor([1, 3, VOCAB, 7, VOCAB, 2])
    top_p = torch.tensor([1.0, 1.0, 0.5, 0.9, 0.05, 0.3])
    got = _kept(apply_top_k_top_p(logits, top_k, top_p))
    for row in range(6):
        ranked = sorted(range(VOCAB), key=lambda t: -logits[row, t].item())
        by_k = set(ranked[: top_k[row]])
        probs = torch.softmax(torch.tensor([logits[row, t].item() for t in ranked if t in by_k]), dim=0).tolist()
        nucleus, mass = set(), 0.0
        for token, p in zip([t for t in ranked if t in by_k], probs, strict=True):
            nucleus.add(token)
            mass += p
            if mass >= top_p[row].item():
                break
        assert got[row] == nucleus, row


def test_min_p_keeps_tokens_at_least_min_p_times_the_best() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, VOCAB) * 2
    min_p = torch.tensor([0.0, 0.1, 0.5])
    got = _kept(apply_min_p(logits, min_p))
    for row in range(3):
        probs = torch.softmax(logits[row], dim=0)
        assert got[row] == {t for t in range(VOCAB) if probs[t] >= min_p[row] * probs.max()}


def test_penalties_follow_the_vllm_formulas() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5, 3.0]])
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    request = _request("a", params, prompt=[0])
    request.all_token_ids += [1, 2, 2]  # output tokens: 1 once, 2 twice
    apply_penalties(logits, [0], [request])
    expected = [2.0 / 2, -2.0 * 2 - 0.5 - 0.25, 1.0 / 2 - 0.5 - 0.5, 0.5, 3.0]
    assert logits[0].tolist() == pytest.approx(expected)


def test_logprobs_are_the_raw_log_softmax_with_top_n() -> None:
    torch.manual_seed(2)
    logits = torch.randn(2, VOCAB)
    sampler = Sampler(eos_token_ids=[0])
    requests = [
        _request("a", SamplingParams(temperature=0.0, logprobs=3, repetition_penalty=1.5)),
        _request("b", SamplingParams(temperature=0.7, seed=3, logprobs=0)),
    ]
    tokens, logprobs = sampler.sample(logits, requests)
    reference = torch.log_softmax(logits, dim=-1)
    for row, lp in enumerate(logprobs):
        assert lp is not None and lp.token_id == tokens[row]
        assert lp.logprob == pytest.approx(reference[row, tokens[row]].item(), abs=1e-6)
    values, ids = reference[0].topk(3)
    assert [t.token_id for t in logprobs[0].top] == ids.tolist()
    assert [t.logprob for t in logprobs[0].top] == pytest.approx(values.tolist())
    assert logprobs[1].top == []


def test_logit_bias_is_added_before_the_choice_and_only_to_its_row() -> None:
    """Greedy and sampled rows alike: +100 forces a token, -100 bans the likeliest; an unbiased batch mate keeps
    its argmax and logprobs stay those of the raw logits."""
    torch.manual_seed(4)
    logits = torch.randn(3, VOCAB)
    best = logits.argmax(dim=-1).tolist()
    sampler = Sampler(eos_token_ids=[0])
    requests = [
        _request("forced", SamplingParams(temperature=0.0, logit_bias={11: 100.0}, logprobs=0)),
        _request("banned", SamplingParams(temperature=0.0, logit_bias={best[1]: -100.0})),
        _request("plain", SamplingParams(temperature=0.0)),
    ]
    tokens, logprobs = sampler.sample(logits, requests)
    assert tokens[0] == 11 and tokens[2] == best[2]
    assert tokens[1] == logits[1].topk(2).indices[1].item()
    assert logprobs[0] is not None
    assert logprobs[0].logprob == pytest.approx(torch.log_softmax(logits[0], -1)[11].item(), abs=1e-6)
    sampled = _request("sampled", SamplingParams(temperature=1.0, seed=5, logit_bias={23: 100.0}))
    assert all(sampler.sample(logits[:1], [sampled])[0] == [23] for _ in range(5))


def test_min_tokens_bans_eos_and_stop_tokens_then_lets_them_stop() -> None:
    logits = torch.full((1, VOCAB), -5.0)
    logits[0, 0] = 10.0  # EOS is by far the most likely
    logits[0, 7] = 9.0  # then a stop token
    sampler = Sampler(eos_token_ids=[0])
    request = _request("a", SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=[7]))
    (token,), _ = sampler.sample(logits, [request])
    assert token not in (0, 7)
    request.all_token_ids += [token]
    assert token_stop(request, token, frozenset([0])) is None
    request.all_token_ids += [5]
    (token,), _ = sampler.sample(logits, [request])
    assert token == 0
    request.all_token_ids += [token]
    assert token_stop(request, token, frozenset([0])) == (RequestStatus.FINISHED_STOPPED, None)


def test_ignore_eos_runs_to_the_length_limit() -> None:
    request = _request("a", SamplingParams(ignore_eos=True, max_tokens=2, stop_token_ids=[9]))
    request.all_token_ids += [0]
    assert token_stop(request, 0, frozenset([0])) is None
    request.all_token_ids += [0]
    assert token_stop(request, 0, frozenset([0])) == (RequestStatus.FINISHED_LENGTH, None)
    stopped = _request("b", SamplingParams(ignore_eos=True, stop_token_ids=[9]))
    stopped.all_token_ids += [9]
    assert token_stop(stopped, 9, frozenset([0])) == (RequestStatus.FINISHED_STOPPED, 9)  # stop ids still stop


def test_top_k_one_is_greedy_even_when_sampling() -> None:
    torch.manual_seed(4)
    logits = torch.randn(4, VOCAB)
    requests = [_request(str(i), SamplingParams(temperature=1.3, top_k=1)) for i in range(4)]
    tokens, _ = Sampler(eos_token_ids=[]).sample(logits, requests)
    assert tokens == logits.argmax(dim=-1).tolist()


@pytest.fixture(scope="module")
def engine(tiny_gqa_llama_dir: Path) -> EngineCore:
    return EngineCore.from_config(
        EngineConfig(model=str(tiny_gqa_llama_dir), dtype="float32", block_size=4, num_kv_blocks=64, device=TEST_DEVICE)
    )


def _run(engine: EngineCore, requests: dict[str, tuple[list[int] | str, SamplingParams]]) -> dict[str, dict]:
    results = {rid: {"tokens": [], "text": "", "out": None} for rid in requests}
    for rid, (prompt, params) in requests.items():
        engine.add_request(rid, prompt, params)
    while engine.has_unfinished():
        for out in engine.step():
            results[out.request_id]["tokens"] += out.new_token_ids
            results[out.request_id]["text"] += out.new_text
            results[out.request_id]["out"] = out
    assert_all_free(engine.block_manager)
    return results


PROMPT = [5, 17, 42, 99, 7, 3, 250, 31]


def test_a_seeded_request_samples_the_same_whatever_its_batch_mates(engine: EngineCore) -> None:
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=12, ignore_eos=True)
    alone = _run(engine, {"x": (PROMPT, params)})["x"]["tokens"]
    crowd = {f"m{i}": ([9 + i] * (3 + i), SamplingParams(temperature=0.9, seed=i, max_tokens=5 + i)) for i in range(4)}
    crowd["u"] = (PROMPT, SamplingParams(temperature=1.0, max_tokens=7))  # unseeded: the engine's generator
    crowd["x"] = (PROMPT, params)
    together = _run(engine, crowd)
    assert together["x"]["tokens"] == alone
    other_seed = _run(
        engine, {"x": (PROMPT, SamplingParams(temperature=1.0, top_p=0.95, seed=99, max_tokens=12, ignore_eos=True))}
    )
    assert other_seed["x"]["tokens"] != alone


def test_stop_token_ids_end_the_request_and_are_kept_out_of_the_text(engine: EngineCore) -> None:
    greedy = _run(engine, {"g": (PROMPT, SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True))})["g"]
    stop_token = greedy["tokens"][3]
    cut = greedy["tokens"].index(stop_token) + 1
    stopped = _run(
        engine, {"s": (PROMPT, SamplingParams(temperature=0.0, max_tokens=10, stop_token_ids=[stop_token]))}
    )["s"]
    assert stopped["tokens"] == greedy["tokens"][:cut]
    assert stopped["out"].finish_reason == "stop" and stopped["out"].stop_reason == stop_token
    # the text of the tokens before the stop token (an unfinished character is never emitted)
    assert stopped["text"] == engine.tokenizer.decode(greedy["tokens"][: cut - 1]).rstrip("\ufffd")


def test_stop_strings_are_found_across_token_boundaries_and_trimmed(engine: EngineCore) -> None:
    prompt = "The capital of France is"
    greedy = _run(engine, {"g": (prompt, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))})["g"]
    text, tokens = greedy["text"], greedy["tokens"]
    decode = engine.tokenizer.decode
    # a stop string made of the end of one token's text and the start of the next one's
    for i in range(2, len(tokens) - 1):
        boundary = len(decode(tokens[:i]))
        left, right = text[max(boundary - 2, 0) : boundary], text[boundary : boundary + 2]
        stop = left + right
        if len(left) == 2 and len(right) == 2 and text.find(stop) == boundary - 2 and "\ufffd" not in stop:
            break
    else:
        pytest.fail(f"no usable token boundary in {text!r}")
    stopped = _run(engine, {"s": (prompt, SamplingParams(temperature=0.0, max_tokens=16, stop=[stop, "never-there"]))})[
        "s"
    ]
    assert stopped["text"] == text[: boundary - 2]
    assert stopped["out"].finish_reason == "stop" and stopped["out"].stop_reason == stop
    needed = next(n for n in range(len(tokens) + 1) if len(decode(tokens[:n])) >= boundary + 2)
    assert stopped["tokens"] == tokens[:needed]  # it stopped at the token completing the stop string


def test_greedy_logprobs_through_the_engine_pick_the_top_token(engine: EngineCore) -> None:
    out = _run(engine, {"l": (PROMPT, SamplingParams(temperature=0.0, max_tokens=4, logprobs=2))})["l"]["out"]
    assert out.new_logprobs is not None
    (lp,) = out.new_logprobs
    assert lp.top[0].token_id == lp.token_id and lp.top[0].logprob == lp.logprob
    assert lp.top[1].logprob <= lp.logprob <= 0.0 and math.isfinite(lp.top[1].logprob)


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.lists(
            st.sampled_from([-1.5, 0.0, 2.0, 7.25, float("inf"), float("-inf"), float("nan")]), min_size=1, max_size=12
        ),
        min_size=1,
        max_size=6,
    ).filter(lambda r: len({len(row) for row in r}) == 1)
)
def test_row_argmax_is_torch_argmax_ties_and_nan_included(rows: list[list[float]]) -> None:
    """The sampler's CPU argmax (numpy's, many times faster here) picks the same index as torch's."""
    x = torch.tensor(rows, dtype=torch.float32)
    assert torch.equal(row_argmax(x), x.argmax(dim=-1))
    assert row_argmax_ids(x) == x.argmax(dim=-1).tolist()
