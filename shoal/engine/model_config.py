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
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe")
ROPE_TYPES = ("default", "linear", "llama3")
# A GGUF architecture with experts -> our name for it (Mixtral is written as ``llama`` with an expert count).
_GGUF_MOE_ARCHITECTURES = {"llama": "mixtral", "qwen3moe": "qwen3_moe"}


class UnsupportedModelError(ValueError):
    """The checkpoint describes a model this engine does not implement; the message names the field."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # "llama" | "mistral" | "qwen2" | "qwen3" | "phi3" | "mixtral" | "qwen3_moe"
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
    moe: MoeConfig | None = None  # mixture of experts (Mixtral, Qwen3-MoE); None: every layer's MLP is dense

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

    def is_sparse(self, layer: int) -> bool:
        """Whether ``layer``'s MLP is a mixture of experts rather than a dense MLP."""
        return self.moe is not None and layer in self.moe.sparse_layers

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
        moe = moe_from_hf(arch, config)
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
            qk_norm=arch in ("qwen3", "qwen3_moe"),
            partial_rotary_factor=float(partial_rotary),
            sliding_window=window,
            bos_token_id=config.get("bos_token_id"),
            eos_token_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]),
            moe=moe,
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
        moe = moe_from_gguf(arch, metadata, get("block_count"))
        return ModelConfig(
            architecture=_GGUF_MOE_ARCHITECTURES.get(arch, arch) if moe else arch,
            hidden_size=hidden,
            intermediate_size=get("feed_forward_length", 0 if moe else None),
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
            qk_norm=arch in ("qwen3", "qwen3moe"),
            rope_freq_factors=rope_freq_factors,
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=tuple(dict.fromkeys(eos)),
            moe=moe,
        )


_ONE_WINDOW_FAMILIES = ("mistral", "phi3", "mixtral")  # a sliding_window applies to every layer


def _sliding_window(arch: str, config: dict[str, Any]) -> int | None:
    """The window every layer attends within (None: full attention); Qwen's per-layer windows are refused."""
    window = config.get("sliding_window")
    if arch in ("qwen2", "qwen3", "qwen3_moe"):
        if config.get("use_sliding_window") and window is not None:
            raise UnsupportedModelError(
                f"sliding_window={window} with use_sliding_window (windows on some layers only) is not supported"
            )
        return None
    if arch in _ONE_WINDOW_FAMILIES and window is not None and window < config.get("max_position_embeddings", 0):
        if window < 1:
            raise UnsupportedModelError(f"sliding_window={window} must be at least 1")
        return int(window)
    return None


@dataclass(frozen=True)
class MoeConfig:
    """A sparse mixture-of-experts MLP: each token's ``experts_per_token`` highest-scoring experts (softmax over
    the router's logits) run, and their outputs are summed weighted by those probabilities."""

    num_experts: int
    experts_per_token: int
    intermediate_size: int  # each expert's
    norm_topk_prob: bool  # the chosen experts' probabilities rescaled to sum to 1 (Mixtral always; Qwen3-MoE asks)
    sparse_layers: frozenset[int]  # the layers whose MLP is the mixture; the others are dense

    def __post_init__(self) -> None:
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise UnsupportedModelError(
                f"num_experts_per_tok={self.experts_per_token} must be between 1 and the number of experts "
                f"({self.num_experts})"
            )


# Config fields of mixtures we do not run: experts every token passes through beside the routed ones.
_SHARED_EXPERT_FIELDS = ("shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts")


def moe_from_hf(arch: str, config: dict[str, Any]) -> MoeConfig | None:
    """The mixture of experts a ``config.json`` describes, with transformers' defaults for absent fields; None
    for a dense model."""
    for name in _SHARED_EXPERT_FIELDS:
        if config.get(name):
            raise UnsupportedModelError(
                f"{name}={config[name]!r}: shared experts are not supported (mixtures of routed experts only: "
                "Mixtral, Qwen3-MoE)"
            )
    layers = config["num_hidden_layers"]
    if arch == "mixtral":
        return MoeConfig(
            num_experts=config.get("num_local_experts", 8),
            experts_per_token=config.get("num_experts_per_tok", 2),
            intermediate_size=config["intermediate_size"],
            norm_topk_prob=True,
            sparse_layers=frozenset(range(layers)),
        )
    if arch != "qwen3_moe":
        return None
    experts = config["num_experts"] if "num_experts" in config else config.get("num_local_experts", 128)
    step = config.get("decoder_sparse_step", 1)
    if not isinstance(step, int) or step < 1:
        raise UnsupportedModelError(f"decoder_sparse_step={step!r} must be a positive integer")
    dense = config.get("mlp_only_layers") or []
    outside = [i for i in dense if not 0 <= i < layers]
    if outside:
        raise UnsupportedModelError(f"mlp_only_layers={dense!r} names layers outside 0..{layers - 1}: {outside}")
    sparse = frozenset(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
    if experts <= 0 or not sparse:
        return None  # transformers builds every layer's MLP dense
    return MoeConfig(
        num_experts=experts,
        experts_per_token=config.get("num_experts_per_tok", 8),
        intermediate_size=config.get("moe_intermediate_size", 768),
        norm_topk_prob=bool(config.get("norm_topk_prob", False)),
        sparse_layers=sparse,
    )


def moe_from_gguf(arch: str, metadata: dict[str, Any], num_layers: int) -> MoeConfig | None:
    """A GGUF's mixture of experts (``{arch}.expert_count``), every layer sparse and the chosen experts'
    probabilities renormalised, as llama.cpp runs Mixtral (``llama``) and ``qwen3moe``; None for a dense model."""
    experts = metadata.get(f"{arch}.expert_count", 0)
    if not experts:
        if arch == "qwen3moe":
            raise UnsupportedModelError("GGUF metadata lacks qwen3moe.expert_count")
        return None
    used = metadata.get(f"{arch}.expert_used_count")
    if used is None:
        raise UnsupportedModelError(f"GGUF metadata lacks {arch}.expert_used_count")
    size_key = f"{arch}.expert_feed_forward_length" if arch == "qwen3moe" else f"{arch}.feed_forward_length"
    if size_key not in metadata:
        raise UnsupportedModelError(f"GGUF metadata lacks {size_key}")
    if metadata.get(f"{arch}.expert_shared_count"):
        raise UnsupportedModelError(
            f"{arch}.expert_shared_count={metadata[f'{arch}.expert_shared_count']}: shared experts are not supported"
        )
    return MoeConfig(
        num_experts=int(experts),
        experts_per_token=int(used),
        intermediate_size=int(metadata[size_key]),
        norm_topk_prob=True,
        sparse_layers=frozenset(range(num_layers)),
    )
