"""Writes a random-weight Hugging Face checkpoint of a named model shape, with the bundled SmolLM2 tokenizer.

For timing an engine where real weights cannot go: the GPU machine is reached through a 64 MiB copy of the
checkout and no model hub. A step's time depends on the architecture's shape and the batch, not on the weights'
values, and calibration runs ask for ``ignore_eos``, so every request generates exactly the tokens asked for.
Two steps, so the tokenizer (rebuilt from the bundled GGUF, a few MB) and the weights (135M to 8B parameters,
drawn on the GPU when there is one) can be made on different machines::

    python bench/shaped_checkpoint.py tokenizer --out DIR
    python bench/shaped_checkpoint.py weights --shape llama3-8b --tokenizer DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

# The shapes' config.json fields: SmolLM2-135M-Instruct as its GGUF states it, Llama-3-8B as Meta publishes it.
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
    },
    # a Llama small enough to write and serve on a CPU in seconds: scripts' smoke runs (bench/gpu_step.py --smoke)
    "tiny-llama": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 49152,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    "llama3-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def write_tokenizer(out: Path) -> None:
    """SmolLM2's tokenizer, rebuilt from the bundled GGUF, as the two files a Hugging Face directory holds."""
    from shoal.model_registry import resolve_model
    from shoal.tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_source(resolve_model("smollm2-135m"))
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.backend.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **tokenizer.special_tokens}
    if tokenizer.chat_template:
        config["chat_template"] = tokenizer.chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(config))


def _layer_tensors(shape: dict[str, Any], layer: int) -> dict[str, tuple[int, ...]]:
    hidden, heads, kv_heads = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    head_dim, inner = hidden // heads, shape["intermediate_size"]
    prefix = f"model.layers.{layer}."
    return {
        prefix + "input_layernorm.weight": (hidden,),
        prefix + "post_attention_layernorm.weight": (hidden,),
        prefix + "self_attn.q_proj.weight": (heads * head_dim, hidden),
        prefix + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
        prefix + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
        prefix + "self_attn.o_proj.weight": (hidden, heads * head_dim),
        prefix + "mlp.gate_proj.weight": (inner, hidden),
        prefix + "mlp.up_proj.weight": (inner, hidden),
        prefix + "mlp.down_proj.weight": (hidden, inner),
    }


def write_weights(name: str, tokenizer_dir: Path, out: Path, seed: int) -> None:
    """config.json, one bf16 safetensors shard per layer (N(0, 0.02) matrices, unit norms) and the tokenizer."""
    import torch
    from safetensors.torch import save_file

    shape = SHAPES[name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device).manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    for file in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / file, out / file)
    tokenizer = json.loads((out / "tokenizer_config.json").read_text())
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]

    def draw(tensors: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        drawn = {}
        for key, size in tensors.items():
            if key.endswith("norm.weight"):
                drawn[key] = torch.ones(size, dtype=torch.bfloat16)
            else:
                values = torch.randn(size, generator=generator, device=device, dtype=torch.bfloat16) * 0.02
                drawn[key] = values.cpu()
        return drawn

    hidden, vocab_size = shape["hidden_size"], shape["vocab_size"]
    ends = {"model.embed_tokens.weight": (vocab_size, hidden), "model.norm.weight": (hidden,)}
    if not shape["tie_word_embeddings"]:
        ends["lm_head.weight"] = (vocab_size, hidden)
    save_file(draw(ends), str(out / "model-ends.safetensors"))
    for layer in range(shape["num_hidden_layers"]):
        save_file(draw(_layer_tensors(shape, layer)), str(out / f"model-layer-{layer:03d}.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
        "bos_token_id": vocab.get(tokenizer.get("bos_token")),
        "eos_token_id": vocab.get(tokenizer.get("eos_token")),
        **shape,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    tokenizer = steps.add_parser("tokenizer", help="SmolLM2's tokenizer files, from the bundled GGUF")
    tokenizer.add_argument("--out", type=Path, required=True)
    weights = steps.add_parser("weights", help="config and random bf16 weights of a shape, with the tokenizer")
    weights.add_argument("--shape", choices=sorted(SHAPES), required=True)
    weights.add_argument("--tokenizer", type=Path, required=True, help="a directory the tokenizer step wrote")
    weights.add_argument("--out", type=Path, required=True)
    weights.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.step == "tokenizer":
        write_tokenizer(args.out)
    else:
        write_weights(args.shape, args.tokenizer, args.out, args.seed)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
