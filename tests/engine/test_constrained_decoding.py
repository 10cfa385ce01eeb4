"""Structured output on the engine core: every output of a random-weight model follows its schema or grammar.

The schemas are drawn by hypothesis (nested objects, arrays, enums, bounded numbers and strings, required and
optional properties) and checked with ``jsonschema``; the rest pins the engine's bookkeeping: a batch that mixes
constrained and unconstrained requests leaves the unconstrained ones exactly their tokens alone, preemption by
recompute does not feed a matcher twice, an abort frees the matcher, and a schema that does not compile is
refused naming its field before anything changes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kv_invariants import assert_all_free
from support.devices import TEST_DEVICE

from shoal.engine import LLM, GrammarSpec, InvalidRequestError, SamplingParams
from shoal.engine.core.token_bitmask import apply_bitmask

MAX_TOKENS = 300  # every schema below is bounded; its outputs here are far shorter than this


@pytest.fixture(scope="module")
def llm(tiny_qwen2_dir: Path) -> LLM:
    return LLM(
        str(tiny_qwen2_dir),
        dtype="float32",
        block_size=4,
        num_kv_blocks=256,
        max_num_batched_tokens=64,
        device=TEST_DEVICE,
    )


def _schema(value: dict[str, Any]) -> GrammarSpec:
    return GrammarSpec.json_schema(value, strict=True, field="response_format")


names = st.from_regex(r"[a-z]{1,6}", fullmatch=True)


@st.composite
def integers(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(-1000, 1000))
    return {"type": "integer", "minimum": low, "maximum": low + draw(st.integers(0, 1000))}


@st.composite
def numbers(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(-50, 50))
    return {"type": "number", "minimum": low, "maximum": low + draw(st.integers(1, 50))}


leaves = st.one_of(
    integers(),
    numbers(),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.integers(1, 8).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(names, min_size=1, max_size=4, unique=True).map(lambda values: {"enum": values}),
)


@st.composite
def objects(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    keys = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    required = [k for k in keys if draw(st.booleans())]
    properties = {k: draw(children) for k in keys}
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def arrays(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return children.map(lambda items: {"type": "array", "items": items, "maxItems": 3})


schemas = st.recursive(leaves, lambda children: st.one_of(objects(children), arrays(children)), max_leaves=6).map(
    lambda s: (
        s
        if s.get("type") == "object"
        else {"type": "object", "properties": {"value": s}, "required": ["value"], "additionalProperties": False}
    )
)


@settings(max_examples=8, deadline=None, derandomize=True)  # the same schemas each run: a failure repeats
@given(schema=schemas, seed=st.integers(0, 2**31))
def test_every_output_validates_against_its_schema(llm: LLM, schema: dict[str, Any], seed: int) -> None:
    spec = _schema(schema)
    params = [
        SamplingParams(temperature=1.0, seed=seed + i, max_tokens=MAX_TOKENS, structured_output=spec) for i in range(2)
    ]
    params.append(SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, structured_output=spec))
    for out in llm.generate(["Reply in JSON:"] * len(params), params):
        assert out.finish_reason == "stop", (schema, out.text)
        jsonschema.validate(json.loads(out.text), schema)


def test_choice_regex_and_grammar_outputs_follow_them(llm: LLM) -> None:
    choices = ["yes", "no", "not sure"]
    regex = r"[A-Z][a-z]{2,5}-\d{2}"
    grammar = 'root ::= "(" item ("," item)* ")"\nitem ::= [0-9] | "x"'
    specs = [
        GrammarSpec.choice(choices, "guided_choice"),
        GrammarSpec("regex", regex, field="guided_regex"),
        GrammarSpec("grammar", grammar, field="guided_grammar"),
    ]
    for seed in range(4):
        params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=40, structured_output=s) for s in specs]
        choice, matched, parsed = llm.generate(["Answer:"] * 3, params)
        assert choice.text in choices and choice.finish_reason == "stop"
        assert re.fullmatch(regex, matched.text) and matched.finish_reason == "stop"
        assert re.fullmatch(r"\(([0-9x])(,[0-9x])*\)", parsed.text), parsed.text


def test_unconstrained_rows_get_their_tokens_alone(llm: LLM) -> None:
    plain = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = ["The capital of France is", "Once upon a time", "def add(a, b):"]
    alone = [out.token_ids for out in llm.generate(prompts, plain)]
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    constrained = SamplingParams(temperature=0.0, max_tokens=40, structured_output=_schema(schema))
    mixed = llm.generate(
        [prompts[0], "x", prompts[1], "y", prompts[2]], [plain, constrained, plain, constrained, plain]
    )
    assert [mixed[0].token_ids, mixed[2].token_ids, mixed[4].token_ids] == alone
    for i in (1, 3):
        jsonschema.validate(json.loads(mixed[i].text), schema)


def test_preemption_keeps_each_matcher_where_its_tokens_are(tiny_qwen2_dir: Path) -> None:
    """A KV cache of 24 blocks of 4 tokens cannot hold four requests of 30 to 60 tokens: they are preempted and
    recomputed, and come out exactly as on a cache that never preempts (a matcher fed twice would diverge)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "tags": {"type": "array", "items": {"enum": ["a", "bb"]}, "maxItems": 6},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    }
    params = [
        SamplingParams(temperature=1.0, seed=s, max_tokens=60, structured_output=_schema(schema)) for s in range(4)
    ]
    prompts = ["Give me a record:"] * 4
    roomy = LLM(str(tiny_qwen2_dir), dtype="float32", block_size=4, num_kv_blocks=256, device=TEST_DEVICE)
    expected = [(o.token_ids, o.text) for o in roomy.generate(prompts, params)]
    tight = LLM(str(tiny_qwen2_dir), dtype="float32", block_size=4, num_kv_blocks=24, device=TEST_DEVICE)
    got = [(o.token_ids, o.text) for o in tight.generate(prompts, params)]
    assert tight.engine.scheduler.num_preemptions > 0
    assert got == expected
    for _, text in got:
        jsonschema.validate(json.loads(text), schema)


def test_abort_frees_the_matcher_and_blocks(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("doomed", "x", SamplingParams(max_tokens=50, structured_output=_schema({"type": "object"})))
    engine.step()
    request = engine.scheduler.running[0]
    assert request.grammar is not None
    engine.abort(["doomed"])
    (out,) = engine.step()
    assert out.finished and out.finish_reason == "abort" and request.grammar is None
    assert not engine.has_unfinished()
    assert_all_free(engine.block_manager)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            GrammarSpec.json_schema({"type": "integer", "minimum": 5, "maximum": 1}, True, "response_format"),
            "response_format",
        ),
        (GrammarSpec.json_schema({"type": "nope"}, False, "guided_json"), "guided_json"),
        (
            GrammarSpec.json_schema({"type": "string", "format": "not-a-format"}, True, "response_format"),
            "response_format",
        ),
        (GrammarSpec("regex", "a(", field="guided_regex"), "guided_regex"),
        (GrammarSpec("grammar", "root ::= missing", field="guided_grammar"), "guided_grammar"),
    ],
)
def test_a_grammar_that_does_not_compile_is_refused_naming_its_field(llm: LLM, spec: GrammarSpec, message: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        llm.engine.add_request("bad", "x", SamplingParams(structured_output=spec))
    assert refused.value.field == message and "could not compile" in refused.value.reason
    assert not llm.engine.has_unfinished()


def test_compiled_grammars_are_cached_and_bounded(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal.engine.core import grammar

    compiler = llm.engine.grammars
    spec = GrammarSpec("regex", "[ab]{3}", field="guided_regex")
    assert compiler.compile(spec) is compiler.compile(spec)
    assert compiler.matcher(spec) is not compiler.compile(spec)
    monkeypatch.setattr(grammar, "CACHE_SIZE", 2)
    for pattern in ("c", "d", "e"):
        compiler.compile(GrammarSpec("regex", pattern, field="guided_regex"))
    assert len(compiler._compiled) == 2 and spec not in compiler._compiled


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_bitmask_masks_exactly_the_cleared_bits_of_the_constrained_rows(device: str) -> None:
    """Against the definition, bit by bit: a vocabulary that is not a multiple of 32, rows out of order."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 77, generator=generator)
    rows = [3, 0]
    bitmask = torch.randint(-(2**31), 2**31 - 1, (2, 3), dtype=torch.int32, generator=generator)
    got = logits.to(device)
    apply_bitmask(got, rows, bitmask.to(device))
    expected = logits.clone()
    for i, row in enumerate(rows):
        for token in range(77):
            if not (int(bitmask[i, token // 32]) >> (token % 32)) & 1:
                expected[row, token] = float("-inf")
    assert torch.equal(got.cpu(), expected)
    assert torch.equal(got.cpu()[[1, 2, 4]], logits[[1, 2, 4]])  # the unconstrained rows are untouched


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is false)")
def test_cuda_constrained_outputs_validate_and_greedy_equals_the_cpus(tiny_qwen2_dir: Path, llm: LLM) -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"enum": ["a", "bb"]}, "maxItems": 4},
            "n": {"type": "integer", "minimum": 0, "maximum": 50},
        },
        "required": ["tags", "n"],
        "additionalProperties": False,
    }
    gpu = LLM(str(tiny_qwen2_dir), device="cuda", dtype="float32", num_kv_blocks=128)
    params = [
        SamplingParams(temperature=1.0, seed=s, max_tokens=80, structured_output=_schema(schema)) for s in range(8)
    ]
    for out in gpu.generate(["Record:"] * 8, params):
        assert out.finish_reason == "stop"
        jsonschema.validate(json.loads(out.text), schema)
    greedy = SamplingParams(temperature=0.0, max_tokens=80, structured_output=_schema(schema))
    assert [o.text for o in gpu.generate(["Record:"], greedy)] == [o.text for o in llm.generate(["Record:"], greedy)]


def test_a_model_with_fewer_logits_than_tokenizer_tokens_refuses_structured_output(llm: LLM) -> None:
    """The masks cover the logits; a tokenizer that names more tokens than the model scores cannot be constrained."""
    from shoal.engine.core.grammar import GrammarCompiler

    narrow = GrammarCompiler(llm.tokenizer, llm.tokenizer.vocab_size - 1, llm.engine.eos_token_ids)
    with pytest.raises(InvalidRequestError, match="tokenizer has") as refused:
        narrow.compile(GrammarSpec.choice(["a"], "guided_choice"))
    assert refused.value.field == "guided_choice"
