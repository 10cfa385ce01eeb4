"""The shape of a Llama-family model, read from a Hugging Face ``config.json`` or from GGUF metadata.

One dataclass drives the model, the loader and the KV-cache sizing, whatever format the checkpoint came in.
Anything the model cannot run faithfully (another architecture, windows on some layers only, an unknown RoPE
scaling) is refused here with an error naming the field, rather than producing wrong logits later. How the
engine runs a model (device, batch limits, KV blocks) is ``shoal.engine.core.engine_config``, not this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Hugging Face ``architectures`` / ``model_type`` and GGUF ``general.architecture`` values we run.
HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
}
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3")


class UnsupportedModelError(ValueError):
    """The checkpoint describes a model this engine does not implement; the message names the field."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # "llama" | "mistral" | "qwen2" | "qwen3" | "phi3"
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False  # RMSNorm of each query and key head before RoPE (Qwen3)
    partial_rotary_factor: float = 1.0  # RoPE rotates the first head_dim * this features (Phi-4-mini: 0.75)
    sliding_window: int | None = None  # each query sees only its last this many positions (Mistral v0.1, Phi-3)
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    # a GGUF's rope_freqs: each RoPE frequency divided by its factor (Llama 3.1+ scaling, as llama.cpp stores it)
    rope_freq_factors: tuple[float, ...] | None = field(default=None, hash=False)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedModelError(
                f"num_attention_heads={self.num_heads} is not a multiple of num_key_value_heads={self.num_kv_heads}"
            )
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.head_dim:
            raise UnsupportedModelError(
                f"partial_rotary_factor={self.partial_rotary_factor} gives {self.rotary_dim} rotary features of "
                f"head_dim={self.head_dim}: it must be an even number between 2 and head_dim"
            )
        if self.rope_freq_factors is not None and len(self.rope_freq_factors) != self.rotary_dim // 2:
            raise UnsupportedModelError(
                f"rope_freqs has {len(self.rope_freq_factors)} factors; the model rotates {self.rotary_dim // 2} "
                "frequencies"
            )
        rope_type = (self.rope_scaling or {}).get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise UnsupportedModelError(f"rope_scaling.rope_type={rope_type!r} is not one of {', '.join(ROPE_TYPES)}")

    @property
    def rotary_dim(self) -> int:
        """Features of each head that RoPE rotates (the first ones; the rest pass through), as transformers counts."""
        return int(self.head_dim * self.partial_rotary_factor)

    @staticmethod
    def from_hf(config: dict[str, Any]) -> ModelConfig:
        """From a parsed ``config.json`` (transformers 4 and 5 spellings of the RoPE settings)."""
        names = config.get("architectures") or [config.get("model_type")]
        arch = HF_ARCHITECTURES.get(names[0]) or (names[0] if names[0] in HF_ARCHITECTURES.values() else None)
        if arch is None:
            raise UnsupportedModelError(
                f"architectures={names!r} is not supported (supported: {', '.join(HF_ARCHITECTURES)})"
            )
        if config.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"hidden_act={config['hidden_act']!r} is not supported (only silu)")
        if config.get("mlp_bias"):
            raise UnsupportedModelError("mlp_bias=true is not supported")
        window = _sliding_window(arch, config)
        heads = config["num_attention_heads"]
        rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
        rope_theta = rope.pop("rope_theta", config.get("rope_theta", 10000.0))
        partial_rotary = rope.pop("partial_rotary_factor", None) or config.get("partial_rotary_factor") or 1.0
        if "type" in rope:  # transformers 4 wrote ``type`` for old scaling configs
            rope.setdefault("rope_type", rope.pop("type"))
        eos = config.get("eos_token_id")
        return ModelConfig(
            architecture=arch,
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            vocab_size=config["vocab_size"],
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            rope_scaling=rope if rope.get("rope_type", "default") != "default" else None,
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            attention_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
            qk_norm=arch == "qwen3",
            partial_rotary_factor=float(partial_rotary),
            sliding_window=window,
            bos_token_id=config.get("bos_token_id"),
            eos_token_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]),
        )

    @staticmethod
    def from_gguf(
        metadata: dict[str, Any], has_output_weight: bool, rope_freq_factors: tuple[float, ...] | None = None
    ) -> ModelConfig:
        """From GGUF metadata; ``has_output_weight`` says whether the file stores an LM head of its own,
        ``rope_freq_factors`` what its ``rope_freqs`` tensor holds."""
        arch = metadata.get("general.architecture")
        if arch not in GGUF_ARCHITECTURES:
            raise UnsupportedModelError(
                f"general.architecture={arch!r} is not supported (supported: {', '.join(GGUF_ARCHITECTURES)})"
            )

        def get(key: str, default: Any = None) -> Any:
            value = metadata.get(f"{arch}.{key}", default)
            if value is None:
                raise UnsupportedModelError(f"GGUF metadata lacks {arch}.{key}")
            return value

        hidden = get("embedding_length")
        heads = get("attention.head_count")
        scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
        if scaling != "none":
            raise UnsupportedModelError(f"{arch}.rope.scaling.type={scaling!r} is not supported")
        eos = [metadata[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in metadata]
        return ModelConfig(
            architecture=arch,
            hidden_size=hidden,
            intermediate_size=get("feed_forward_length"),
            num_layers=get("block_count"),
            num_heads=heads,
            num_kv_heads=get("attention.head_count_kv", heads),
            head_dim=get("attention.key_length", hidden // heads),
            vocab_size=metadata.get(f"{arch}.vocab_size") or len(metadata["tokenizer.ggml.tokens"]),
            rms_norm_eps=get("attention.layer_norm_rms_epsilon"),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            max_position_embeddings=get("context_length"),
            tie_word_embeddings=not has_output_weight,
            attention_bias=arch == "qwen2",
            qk_norm=arch == "qwen3",
            rope_freq_factors=rope_freq_factors,
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=tuple(dict.fromkeys(eos)),
        )


def _sliding_window(arch: str, config: dict[str, Any]) -> int | None:
    """The window every layer attends within (None: full attention); Qwen's per-layer windows are refused."""
    window = config.get("sliding_window")
    if arch in ("qwen2", "qwen3"):
        if config.get("use_sliding_window") and window is not None:
            raise UnsupportedModelError(
                f"sliding_window={window} with use_sliding_window (windows on some layers only) is not supported"
            )
        return None
    if arch in ("mistral", "phi3") and window is not None and window < config.get("max_position_embeddings", 0):
        if window < 1:
            raise UnsupportedModelError(f"sliding_window={window} must be at least 1")
        return int(window)
    return None
