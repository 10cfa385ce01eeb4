"""Bad model input fails early with an error naming the alias, path, field or tensor at fault."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import load_file, save_file

from shoal.engine.loader import WeightsError, load_model
from shoal.engine.model_config import ModelConfig, UnsupportedModelError
from shoal.kernels import TorchOps
from shoal.model_registry import ModelNotFoundError, resolve_model
from shoal.tokenizer import Tokenizer, TokenizerFilesError, UnsupportedTokenizerError


def copy_checkpoint(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / "ckpt"))


def load(directory: Path):
    return load_model(resolve_model(str(directory)), torch.float32, TorchOps())


def test_unknown_alias_names_it_and_lists_the_known_ones() -> None:
    with pytest.raises(ModelNotFoundError, match=r"'llama-9000'.*smollm2-135m"):
        resolve_model("llama-9000")


def test_missing_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ModelNotFoundError, match=str(missing)):
        resolve_model(str(missing))


def test_directory_without_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match=rf"{tmp_path}.*config\.json"):
        resolve_model(str(tmp_path))


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"\0" * 16)
    with pytest.raises(ModelNotFoundError, match=r"not a .gguf"):
        resolve_model(str(weights))


def test_resolved_sources() -> None:
    source = resolve_model("smollm2-135m")
    assert (source.format, source.served_name) == ("gguf", "smollm2-135m")
    assert source.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert source.path.stat().st_size == 98_362_432


def test_hf_directory_resolves(tiny_llama_dir: Path) -> None:
    source = resolve_model(str(tiny_llama_dir))
    assert (source.format, source.path) == ("hf", tiny_llama_dir.resolve())


def test_unsupported_architecture_is_named(tiny_llama_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_llama_dir, tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = ["GPTNeoXForCausalLM"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="GPTNeoXForCausalLM"):
        load(directory)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"architectures": ["MistralForCausalLM"], "sliding_window": 0}, "sliding_window"),
        (
            {
                "architectures": ["Qwen2ForCausalLM"],
                "sliding_window": 8,
                "use_sliding_window": True,
                "layer_types": ["full_attention", "chunked_attention"],
            },
            r"layer_types 'chunked_attention' are not supported \(supported: full_attention, sliding_attention\)",
        ),
        (
            {
                "architectures": ["Qwen2ForCausalLM"],
                "sliding_window": 8,
                "use_sliding_window": True,
                "layer_types": ["sliding_attention"],
            },
            "layer_types names 1 layers; num_hidden_layers=2",
        ),
        (
            {"architectures": ["Gemma2ForCausalLM"], "hidden_activation": "silu"},
            r"hidden_act='silu' .*gelu_pytorch_tanh",
        ),
        ({"architectures": ["Gemma3ForCausalLM"], "use_bidirectional_attention": True}, "use_bidirectional_attention"),
        (
            {
                "architectures": ["Gemma3ForCausalLM"],
                "hidden_activation": "gelu_pytorch_tanh",
                "rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}},
            },
            "rope_parameters.sliding_attention.rope_type='linear'",
        ),
        (
            {
                "architectures": ["Gemma2ForCausalLM"],
                "hidden_activation": "gelu_pytorch_tanh",
                "attn_logit_softcapping": 0,
            },
            "attn_logit_softcapping=0 must be positive",
        ),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope_type"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"architectures": ["Phi3ForCausalLM"], "rope_parameters": {"rope_type": "longrope"}}, "rope_type"),
        ({"partial_rotary_factor": 0.3125}, "partial_rotary_factor"),  # 5 of head_dim 16: not pairs
    ],
)
def test_unsupported_settings_are_named(overrides: dict, field: str, tiny_llama_dir: Path) -> None:
    config = json.loads((tiny_llama_dir / "config.json").read_text()) | overrides
    with pytest.raises(UnsupportedModelError, match=field):
        ModelConfig.from_hf(config)


def test_qwen_windows_on_the_layers_from_max_window_layers_and_gemma_patterns_are_read() -> None:
    """Without ``layer_types`` (configs written before transformers 5) each family's own default pattern."""
    base = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100}
    base |= {"max_position_embeddings": 64}
    qwen = ModelConfig.from_hf(
        base
        | {
            "architectures": ["Qwen2ForCausalLM"],
            "num_hidden_layers": 3,
            "sliding_window": 8,
            "use_sliding_window": True,
            "max_window_layers": 1,
            "max_position_embeddings": 64,
        }
    )
    assert [qwen.window_of(i) for i in range(3)] == [None, 8, 8]
    assert qwen.window_of_every_layer is None  # a global layer reads every block: none is released
    off = ModelConfig.from_hf(
        base | {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2, "sliding_window": 8}
    )
    assert [off.window_of(i) for i in range(2)] == [None, None]
    gemma2 = ModelConfig.from_hf(
        base
        | {
            "architectures": ["Gemma2ForCausalLM"],
            "num_hidden_layers": 4,
            "sliding_window": 8,
            "hidden_activation": "gelu_pytorch_tanh",
        }
    )
    assert [gemma2.window_of(i) for i in range(4)] == [8, None, 8, None]
    assert gemma2.window_of_every_layer is None
    mistral = ModelConfig.from_hf(
        base | {"architectures": ["MistralForCausalLM"], "num_hidden_layers": 2, "sliding_window": 8}
    )
    assert [mistral.window_of(i) for i in range(2)] == [8, 8] and mistral.window_of_every_layer == 8
    assert (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping, gemma2.attention_scale) == (50, 30, 1 / 16)
    gemma3 = ModelConfig.from_hf(
        base
        | {
            "architectures": ["Gemma3ForCausalLM"],
            "num_hidden_layers": 7,
            "sliding_window": 8,
            "sliding_window_pattern": 6,
            "rope_theta": 1e6,
            "rope_local_base_freq": 1e4,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "hidden_activation": "gelu_pytorch_tanh",
        }
    )
    assert [gemma3.window_of(i) for i in range(7)] == [8, 8, 8, 8, 8, None, 8]
    assert (gemma3.rope_theta, gemma3.rope_local_theta, gemma3.rope_scaling) == (
        1e6,
        1e4,
        {"rope_type": "linear", "factor": 8.0},
    )
    assert gemma3.qk_norm and gemma3.tie_word_embeddings and gemma3.attn_logit_softcapping is None


class _NoWindowOps(TorchOps):
    """A stand-in for a kernel backend that masks no sliding window (every real one does today)."""

    name = "no-window"
    masks_sliding_window = False


class _NoCapOps(TorchOps):
    """A stand-in for a kernel backend that soft-caps no scores (every real one does today)."""

    name = "no-cap"
    caps_attention_logits = False


@pytest.mark.parametrize(
    ("checkpoint", "ops", "message"),
    [
        (
            "tiny_mistral_window_dir",
            _NoWindowOps,
            r"sliding_window=6: the model attends within a sliding window, which the no-window attention backend "
            r"does not mask; serve it with another --attention-backend",
        ),
        (
            "tiny_gemma2_dir",
            _NoCapOps,
            r"attn_logit_softcapping=2\.0: the model soft-caps its attention scores, which the no-cap attention "
            r"backend does not; serve it with another --attention-backend",
        ),
    ],
)
def test_a_model_refuses_a_backend_lacking_its_window_or_soft_cap_when_built(
    checkpoint: str, ops: type[TorchOps], message: str, request: pytest.FixtureRequest
) -> None:
    """Built on kernels that would ignore the window or the cap, the model fails naming the field, rather than
    attend wrongly."""
    from shoal.engine.model import build_model

    model_dir: Path = request.getfixturevalue(checkpoint)
    config = json.loads((model_dir / "config.json").read_text())
    with torch.device("meta"), pytest.raises(UnsupportedModelError, match=message):
        build_model(ModelConfig.from_hf(config), ops())


def test_transformers_4_rope_spelling_is_understood() -> None:
    config = ModelConfig.from_hf(
        {
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "vocab_size": 100,
            "rope_theta": 500000.0,
            "rope_scaling": {"type": "linear", "factor": 2.0},
            "eos_token_id": [7, 9],
        }
    )
    assert (config.rope_theta, config.rope_scaling, config.num_kv_heads, config.head_dim) == (
        500000.0,
        {"rope_type": "linear", "factor": 2.0},
        4,
        16,
    )
    assert config.eos_token_ids == (7, 9)


def test_missing_weights_are_named(tiny_llama_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_llama_dir, tmp_path)
    (directory / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match=rf"no \*\.safetensors weights in '{directory}'"):
        load(directory)


def test_missing_shard_is_named(tiny_llama_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_llama_dir, tmp_path)
    index = {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match=r"model-00002-of-00002.safetensors"):
        load(directory)


def test_sharded_checkpoint_loads_like_a_single_file(tiny_llama_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_llama_dir, tmp_path)
    tensors = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, directory / shard)
    weight_map = {n: shard for shard, shard_names in shards.items() for n in shard_names}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    sharded, single = load(directory), load(tiny_llama_dir)
    for (name, a), (_, b) in zip(sharded.state_dict().items(), single.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda t: t.update({"model.layers.0.mlp.expert.weight": torch.zeros(2)}), "model.layers.0.mlp.expert.weight"),
        (lambda t: t.pop("model.norm.weight"), "norm.weight"),
        (lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"), "layers.1.self_attn.qkv_proj.weight"),
        (lambda t: t.update({"model.norm.weight": torch.ones(7)}), "norm.weight"),
    ],
    ids=["unknown", "missing", "missing-part-of-fused", "wrong-shape"],
)
def test_unexpected_or_missing_tensors_are_named(edit, named: str, tiny_llama_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_llama_dir, tmp_path)
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(WeightsError, match=named):
        load(directory)


def test_gguf_of_another_architecture_is_named(tmp_path: Path) -> None:
    path = tmp_path / "falcon.gguf"
    writer = gguf.GGUFWriter(path, "falcon")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match=r"general.architecture='falcon'"):
        load(path)


def test_gguf_with_a_unigram_vocabulary_is_named(tmp_path: Path) -> None:
    """T5's unigram vocabulary (llama.cpp's "t5" type): neither byte-level nor SentencePiece BPE."""
    path = tmp_path / "unigram.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("t5")
    writer.add_token_list(["<unk>", "a"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        UnsupportedTokenizerError, match=r"tokenizer.ggml.model='t5' is not supported \(supported: 'gpt2'"
    ):
        Tokenizer.from_gguf(path)


@pytest.mark.parametrize("pre", ["mystery-bpe", "gpt-4o"])
def test_gguf_with_an_unknown_word_split_is_named(pre: str, tmp_path: Path) -> None:
    """GPT-2's split in place of one we do not know would give other token ids than the model was trained on."""
    path = tmp_path / "unknown-pre.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(["a", "b", "ab"])
    writer.add_token_merges(["a b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedTokenizerError, match=rf"tokenizer.ggml.pre='{pre}' is not supported"):
        Tokenizer.from_gguf(path)


def test_directory_without_tokenizer_json_is_named(tiny_llama_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_llama_dir, tmp_path)
    (directory / "tokenizer.json").unlink()
    with pytest.raises(TokenizerFilesError, match=rf"no tokenizer.json in '{directory}'"):
        Tokenizer.from_source(resolve_model(str(directory)))


def test_corrupt_gguf_is_named(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + b"\xff" * 64)
    with pytest.raises(ValueError, match=r"broken.gguf"):
        load(path)
