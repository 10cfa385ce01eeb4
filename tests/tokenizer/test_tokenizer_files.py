"""The places a Hugging Face directory can keep its chat template and special tokens are all read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shoal.tokenizer import Tokenizer


@pytest.fixture
def tokenizer_dir(tiny_tokenizer_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_tokenizer_dir, tmp_path / "tok"))


def edit_config(directory: Path, **changes: object) -> None:
    path = directory / "tokenizer_config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_chat_template_jinja_file_wins_over_the_config_entry(tokenizer_dir: Path) -> None:
    """transformers 5 saves the template next to the config as chat_template.jinja."""
    (tokenizer_dir / "chat_template.jinja").write_text("{{ messages[0]['content'] | upper }}")
    assert Tokenizer.from_hf_dir(tokenizer_dir).apply_chat_template([{"role": "user", "content": "hi"}]) == "HI"


def test_named_template_list_uses_the_default_one(tokenizer_dir: Path) -> None:
    templates = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}plain"}]
    edit_config(tokenizer_dir, chat_template=templates)
    assert Tokenizer.from_hf_dir(tokenizer_dir).apply_chat_template([]) == "<|im_start|>plain"


def test_special_tokens_written_as_added_token_dicts(tokenizer_dir: Path) -> None:
    edit_config(tokenizer_dir, eos_token={"content": "<|endoftext|>", "special": True, "__type": "AddedToken"})
    (tokenizer_dir / "generation_config.json").unlink()
    tokenizer = Tokenizer.from_hf_dir(tokenizer_dir)
    assert tokenizer.eos_token_ids == {tokenizer.backend.token_to_id("<|endoftext|>")}
    assert tokenizer.special_tokens["eos_token"] == "<|endoftext|>"


def test_template_variables_follow_hugging_face(tokenizer_dir: Path) -> None:
    """tojson keeps non-ASCII as is; trim_blocks/lstrip_blocks drop the newlines and indentation of tags."""
    template = "{% for m in messages %}\n    {{ m | tojson }}\n{% endfor %}"
    edit_config(tokenizer_dir, chat_template=template)
    rendered = Tokenizer.from_hf_dir(tokenizer_dir).apply_chat_template([{"role": "user", "content": "café <b>"}])
    assert rendered == '    {"role": "user", "content": "café <b>"}\n'
