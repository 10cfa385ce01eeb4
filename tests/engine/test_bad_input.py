"""Bad input is refused with an error naming the field or path, and the rest of the batch never notices."""

from __future__ import annotations

from pathlib import Path

import pytest
from kv_invariants import assert_all_free
from support.devices import TEST_DEVICE

from shoal.engine.core import EngineConfig, EngineCore, InvalidRequestError, SamplingParams
from shoal.model_registry import ModelNotFoundError

GOOD = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_llama_dir: Path) -> EngineCore:
    return EngineCore.from_config(
        EngineConfig(
            model=str(tiny_llama_dir),
            dtype="float32",
            block_size=4,
            num_kv_blocks=32,
            max_model_len=40,
            device=TEST_DEVICE,
        )
    )


def _drain(engine: EngineCore) -> dict[str, list]:
    outputs: dict[str, list] = {}
    while engine.has_unfinished():
        for out in engine.step():
            outputs.setdefault(out.request_id, []).append(out)
    assert_all_free(engine.block_manager)
    return outputs


@pytest.mark.parametrize(
    ("field", "options"),
    [
        ("max_tokens", {"max_tokens": 0}),
        ("top_p", {"top_p": 0.0}),
        ("top_p", {"top_p": 1.5}),
        ("temperature", {"temperature": -0.5}),
        ("min_p", {"min_p": 2.0}),
        ("min_tokens", {"min_tokens": 9, "max_tokens": 3}),
        ("logprobs", {"logprobs": -1}),
    ],
)
def test_sampling_params_out_of_range_name_the_field(field: str, options: dict) -> None:
    with pytest.raises(InvalidRequestError) as error:
        SamplingParams(**options)
    assert error.value.field == field and field in str(error.value)


def test_bad_requests_leave_their_batch_mates_untouched(engine: EngineCore) -> None:
    prompts = {"a": [5, 6, 7, 8, 9], "b": [40, 41, 42]}
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, GOOD)
    alone = {rid: [t for o in outs for t in o.new_token_ids] for rid, outs in _drain(engine).items()}

    engine.add_request("a", prompts["a"], GOOD)
    first = engine.step()  # "a" is mid-flight when the bad ones arrive
    with pytest.raises(InvalidRequestError) as too_long:
        engine.add_request("long", list(range(3, 43)), GOOD)
    assert too_long.value.field == "prompt" and "max_model_len is 40" in str(too_long.value)
    with pytest.raises(InvalidRequestError) as outside:
        engine.add_request("oov", [3, 10**6], GOOD)
    assert outside.value.field == "prompt" and "1000000" in str(outside.value)
    with pytest.raises(InvalidRequestError) as stop_outside:  # min_tokens bans stop ids by indexing the logits
        engine.add_request("stop-oov", [3, 4], SamplingParams(max_tokens=4, min_tokens=2, stop_token_ids=[10**6]))
    assert stop_outside.value.field == "stop_token_ids" and "1000000" in str(stop_outside.value)
    with pytest.raises(InvalidRequestError) as empty:
        engine.add_request("empty", [], GOOD)
    assert empty.value.field == "prompt"
    with pytest.raises(InvalidRequestError) as duplicate:
        engine.add_request("a", [1, 2], GOOD)
    assert duplicate.value.field == "request_id"
    engine.add_request("b", prompts["b"], GOOD)
    outputs = _drain(engine)
    outputs["a"] = first + outputs["a"]
    together = {rid: [t for o in outs for t in o.new_token_ids] for rid, outs in outputs.items()}
    assert together == alone


def test_a_prompt_near_max_model_len_stops_for_length(engine: EngineCore) -> None:
    engine.add_request("edge", list(range(3, 40)), SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True))
    outs = _drain(engine)["edge"]
    assert sum(len(o.new_token_ids) for o in outs) == 3 and outs[-1].finish_reason == "length"


def test_abort_frees_blocks_at_once_and_reports_abort(engine: EngineCore) -> None:
    engine.add_request("keep", [11, 12, 13], GOOD)
    engine.add_request("drop", list(range(3, 23)), SamplingParams(max_tokens=30, ignore_eos=True))
    engine.add_request("queued", [14, 15], GOOD)
    engine.step()
    free_before = engine.block_manager.num_free_blocks
    engine.abort(["drop", "queued", "unknown-id"])
    assert engine.block_manager.num_free_blocks > free_before
    outs = _drain(engine)
    assert outs["drop"][-1].finished and outs["drop"][-1].finish_reason == "abort"
    assert outs["queued"][-1].finish_reason == "abort"
    assert outs["keep"][-1].finish_reason == "length"
    assert engine.stats().finished_by_reason["abort"] >= 2


def test_unknown_model_names_the_model() -> None:
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        EngineCore.from_config(EngineConfig(model="no-such-model", device=TEST_DEVICE))


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "gone.gguf"
    with pytest.raises(ModelNotFoundError, match=str(missing)):
        EngineCore.from_config(EngineConfig(model=str(missing), device=TEST_DEVICE))
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    with pytest.raises(ModelNotFoundError, match=r"config.json"):
        EngineCore.from_config(EngineConfig(model=str(incomplete), device=TEST_DEVICE))


def test_engine_options_the_kernels_cannot_serve_name_the_option(tiny_llama_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"block_size must be a power of two.*12"):
        EngineConfig(model=str(tiny_llama_dir), block_size=12, device=TEST_DEVICE)
    with pytest.raises(ValueError, match="max_model_len 100000 exceeds the model's context length"):
        EngineCore.from_config(
            EngineConfig(
                model=str(tiny_llama_dir), dtype="float32", num_kv_blocks=8, max_model_len=100000, device=TEST_DEVICE
            )
        )
