"""Adapters the engine cannot apply exactly are refused with the reason, before anything changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from lora_adapters import write_adapter

from shoal.engine.core import EngineConfig, EngineCore
from shoal.engine.lora import LoRAError


@pytest.fixture(scope="module")
def core(tiny_gqa_llama_dir: Path) -> EngineCore:
    config = EngineConfig(
        model=str(tiny_gqa_llama_dir), dtype="float32", device="cpu", quantization="none", enable_lora=True
    )
    return EngineCore.from_config(config)


@pytest.fixture(scope="module")
def good_adapter(tiny_gqa_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_adapter(tiny_gqa_llama_dir, tmp_path_factory.mktemp("good"), 1, r=4, target_modules=["q_proj"])


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"use_dora": True}, "sets use_dora"),
        ({"rank_pattern": {"q_proj": 2}}, "per-module rank_pattern"),
        ({"bias": "all"}, "trains biases"),
        ({"peft_type": "IA3"}, "is not a LoRA adapter's config"),
        ({"target_modules": ["q_proj", "embed_tokens"]}, "targets 'embed_tokens'"),
    ],
)
def test_configs_the_engine_cannot_apply(
    core: EngineCore, good_adapter: Path, tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    adapter = Path(shutil.copytree(good_adapter, tmp_path / "adapter"))
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(LoRAError, match=reason) as error:
        core.read_lora("bad", str(adapter))
    assert error.value.field == "lora_path"


def test_missing_weights_and_lora_off(
    core: EngineCore, good_adapter: Path, tmp_path: Path, tiny_gqa_llama_dir: Path
) -> None:
    adapter = Path(shutil.copytree(good_adapter, tmp_path / "adapter"))
    (adapter / "adapter_model.safetensors").unlink()
    with pytest.raises(LoRAError, match=r"no adapter_model\.safetensors"):
        core.read_lora("bad", str(adapter))
    assert core.read_lora("good", str(good_adapter)).rank == 4
    plain = EngineCore.from_config(EngineConfig(model=str(tiny_gqa_llama_dir), dtype="float32", device="cpu"))
    with pytest.raises(LoRAError, match="--enable-lora"):
        plain.read_lora("good", str(good_adapter))
