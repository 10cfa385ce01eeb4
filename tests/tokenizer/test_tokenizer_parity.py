"""Our tokenizers encode, decode and render chat templates exactly like transformers' on the same files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.tokenizer import ChatTemplateError, Tokenizer

SAMPLES = [
    "The capital of France is",
    "Hello  world\n\n  indented\ttab\r\nwindows",
    "<|im_start|>user\nhi<|im_end|>\n",
    "東京は日本の首都です。🐟🌊🚀 👩‍👩‍👧",
    "naïve café, Ünïcödé",
    "year 2024, pi 3.14159",
    "   leading and trailing   ",
    "they're we'll I'd it's",
    "def f(x):\n    return x ** 2  # square\n",
    "",
]
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome"},
        {"role": "user", "content": "And Germany? 🇩🇪"},
    ],
]
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
# transformers rebuilds SmolLM's GGUF tokenizer with plain GPT-2 splitting; the file's ``tokenizer.ggml.pre =
# smollm`` (like llama.cpp and SmolLM's own tokenizer.json) isolates every numeric character first. The two only
# differ on a space before a non-ASCII numeral (" ½"), so the comparison with transformers leaves numerals out.
NON_NUMERIC_TEXT = st.text(st.characters(exclude_categories=("Cs", "Nd", "Nl", "No")), max_size=60)


def assert_same_tokenization(ours: Tokenizer, hf, text: str) -> None:
    for special in (True, False):
        ids = ours.encode(text, add_special_tokens=special)
        assert ids == hf.encode(text, add_special_tokens=special)
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


def assert_same_chat(ours: Tokenizer, hf) -> None:
    for messages in CONVERSATIONS:
        for generation_prompt in (True, False):
            expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
            assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt) == expected


@pytest.mark.slow
@pytest.mark.parametrize("text", SAMPLES)
def test_smollm2_gguf_tokenizer_matches_transformers(
    text: str, smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer
) -> None:
    assert_same_tokenization(smollm2_tokenizer, smollm2_hf_tokenizer, text)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(text=NON_NUMERIC_TEXT)
def test_smollm2_gguf_tokenizer_matches_transformers_on_any_text(
    text: str, smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer
) -> None:
    assert_same_tokenization(smollm2_tokenizer, smollm2_hf_tokenizer, text)


@pytest.mark.slow
@pytest.mark.parametrize("numeral", ["7", "½", "٣", "Ⅻ"])
def test_smollm2_numerals_are_split_off_like_llama_cpp(numeral: str, smollm2_tokenizer: Tokenizer) -> None:
    """SmolLM's pre-tokenizer: each numeric character is a word of its own, never glued to the space before it."""
    ids = smollm2_tokenizer.encode(f"a {numeral}{numeral}")
    assert ids == smollm2_tokenizer.encode("a") + smollm2_tokenizer.encode(" ") + smollm2_tokenizer.encode(numeral) * 2


@pytest.mark.slow
def test_smollm2_special_tokens_and_chat_template(smollm2_tokenizer: Tokenizer, smollm2_hf_tokenizer) -> None:
    assert smollm2_tokenizer.bos_token_id == smollm2_hf_tokenizer.bos_token_id == 1
    assert smollm2_tokenizer.eos_token_ids == {smollm2_hf_tokenizer.eos_token_id} == {2}
    assert smollm2_tokenizer.vocab_size == len(smollm2_hf_tokenizer) == 49152
    # control tokens stay whole in the text instead of being spelled out byte by byte
    assert smollm2_tokenizer.encode("<|im_start|>user") == [1, 4093]
    assert_same_chat(smollm2_tokenizer, smollm2_hf_tokenizer)


@pytest.mark.parametrize("text", SAMPLES)
def test_hf_dir_tokenizer_matches_transformers(text: str, tiny_tokenizer: Tokenizer, tiny_hf_tokenizer) -> None:
    assert_same_tokenization(tiny_tokenizer, tiny_hf_tokenizer, text)


def test_hf_dir_special_tokens_and_chat_template(tiny_tokenizer: Tokenizer, tiny_hf_tokenizer) -> None:
    bos, eos = tiny_hf_tokenizer.bos_token_id, tiny_hf_tokenizer.eos_token_id
    assert tiny_tokenizer.bos_token_id == bos
    assert tiny_tokenizer.encode("hi")[0] == bos  # tokenizer.json's post-processor adds it
    # tokenizer_config's eos plus generation_config.json's list
    assert tiny_tokenizer.eos_token_ids == {eos, 0, 2}
    assert_same_chat(tiny_tokenizer, tiny_hf_tokenizer)


def test_chat_template_raise_exception_is_a_clear_error(tiny_tokenizer: Tokenizer) -> None:
    with pytest.raises(ChatTemplateError, match="Unknown role: robot"):
        tiny_tokenizer.apply_chat_template([{"role": "robot", "content": "beep"}])


def test_gemma_chat_template_renders_like_transformers(gemma_template_dir) -> None:
    """Gemma's template: the system message folded into the first user turn, the assistant called "model",
    contents trimmed, a content list's text parts joined, roles made to alternate."""
    import transformers

    ours, hf = Tokenizer.from_hf_dir(gemma_template_dir), transformers.AutoTokenizer.from_pretrained(gemma_template_dir)
    assert_same_chat(ours, hf)
    parts = [{"role": "user", "content": [{"type": "text", "text": " one "}, {"type": "text", "text": "two\n"}]}]
    expected = hf.apply_chat_template(parts, tokenize=False, add_generation_prompt=True)
    assert (
        ours.apply_chat_template(parts)
        == expected
        == "<|im_start|><start_of_turn>user\nonetwo<end_of_turn>\n<start_of_turn>model\n"
    )
    with pytest.raises(ChatTemplateError, match="Conversation roles must alternate"):
        ours.apply_chat_template([{"role": "assistant", "content": "first"}])


@settings(max_examples=200, deadline=None)
@given(text=TEXT)
def test_any_text_round_trips(text: str, tiny_tokenizer: Tokenizer) -> None:
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert tiny_tokenizer.decode(ids, skip_special_tokens=False) == text
