"""The shape of a Llama- or Gemma-family model, read from a Hugging Face ``config.json`` or from GGUF metadata.

One dataclass drives the model, the loader and the KV-cache sizing, whatever format the checkpoint came in.
Attention may differ per layer (Gemma's and Qwen's interleaved sliding-window and global layers): ``window_of``
gives each layer's window. Anything the model cannot run faithfully (another architecture, an unknown layer type,
an unknown RoPE scaling) is refused here with an error naming the field, rather than producing wrong logits later.
How the engine runs a model (device, batch limits, KV blocks) is ``shoal.engine.core.engine_config``, not this.
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
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
GEMMA_ARCHITECTURES = ("gemma2", "gemma3_text")
HIDDEN_ACTS = {
    "silu": ("llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen3_moe"),
    "gelu_pytorch_tanh": GEMMA_ARCHITECTURES,
}
LAYER_TYPES = ("full_attention", "sliding_attention")
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3")
ROPE_TYPES = ("default", "linear", "llama3")
# A GGUF architecture with experts -> our name for it (Mixtral is written as ``llama`` with an expert count).
_GGUF_MOE_ARCHITECTURES = {"llama": "mixtral", "qwen3moe": "qwen3_moe"}


class UnsupportedModelError(ValueError):
    """The checkpoint describes a model this engine does not implement; the message names the field."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # "llama" | "mistral" | "qwen2" | "qwen3" | "phi3" | "gemma2" | "gemma3_text" | "mixtral" | ...
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
    # which layers attend within sliding_window (None: every layer when there is one); Gemma, Qwen's layer_types
    sliding_layers: tuple[bool, ...] | None = None
    hidden_act: str = "silu"  # the MLP's gate activation: silu (SwiGLU) or gelu_pytorch_tanh (Gemma's GeGLU)
    query_pre_attn_scalar: float | None = None  # attention scores scaled by this ** -0.5, not head_dim ** -0.5
    attn_logit_softcapping: float | None = None  # scores become tanh(s / cap) * cap before the softmax (Gemma 2)
    final_logit_softcapping: float | None = None  # the same on the LM head's logits
    rope_local_theta: float | None = None  # RoPE base of the sliding-window layers, when not rope_theta (Gemma 3)
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
        if self.sliding_layers is not None and len(self.sliding_layers) != self.num_layers:
            raise UnsupportedModelError(
                f"layer_types names {len(self.sliding_layers)} layers; num_hidden_layers={self.num_layers}"
            )
        if self.hidden_act not in HIDDEN_ACTS or self.architecture not in HIDDEN_ACTS[self.hidden_act]:
            supported = ", ".join(act for act, archs in HIDDEN_ACTS.items() if self.architecture in archs)
            raise UnsupportedModelError(
                f"hidden_act={self.hidden_act!r} is not supported for {self.architecture} (supported: {supported})"
            )
        for name in ("attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UnsupportedModelError(f"{name}={value} must be positive")

    def window_of(self, layer: int) -> int | None:
        """The sliding window layer ``layer`` attends within (None: every earlier position)."""
        if self.sliding_layers is not None and not self.sliding_layers[layer]:
            return None
        return self.sliding_window

    def is_sparse(self, layer: int) -> bool:
        """Whether ``layer``'s MLP is a mixture of experts rather than a dense MLP."""
        return self.moe is not None and layer in self.moe.sparse_layers

    @property
    def window_of_every_layer(self) -> int | None:
        """The window all layers attend within, or None when any layer sees every earlier position: the KV blocks
        behind it are dead in every layer only then (the block manager releases them)."""
        if self.sliding_layers is not None and not all(self.sliding_layers):
            return None
        return self.sliding_window

    @property
    def attention_scale(self) -> float:
        """What each query-key dot product is multiplied by before the softmax."""
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

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
        if config.get("mlp_bias"):
            raise UnsupportedModelError("mlp_bias=true is not supported")
        gemma = arch in GEMMA_ARCHITECTURES
        if gemma and config.get("use_bidirectional_attention"):
            raise UnsupportedModelError("use_bidirectional_attention=true is not supported (causal attention only)")
        window = _sliding_window(arch, config)
        sliding_layers = _sliding_layers(arch, config) if window is not None else None
        heads = config["num_attention_heads"]
        moe = moe_from_hf(arch, config)
        rope, local_theta = _rope_parameters(arch, config)
        default_theta = 1_000_000.0 if arch == "gemma3_text" else 10000.0  # transformers' defaults
        rope_theta = rope.pop("rope_theta", config.get("rope_theta", default_theta))
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
            tie_word_embeddings=bool(config.get("tie_word_embeddings", gemma)),
            attention_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
            qk_norm=arch in ("qwen3", "qwen3_moe", "gemma3_text"),
            partial_rotary_factor=float(partial_rotary),
            sliding_window=window,
            sliding_layers=sliding_layers,
            hidden_act=config.get("hidden_activation") or config.get("hidden_act") or "silu",
            query_pre_attn_scalar=config.get("query_pre_attn_scalar", 256) if gemma else None,
            attn_logit_softcapping=config.get("attn_logit_softcapping", 50.0 if arch == "gemma2" else None),
            final_logit_softcapping=config.get("final_logit_softcapping", 30.0 if arch == "gemma2" else None),
            rope_local_theta=local_theta,
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
        head_dim = get("attention.key_length", hidden // heads)
        scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
        gemma = _gguf_gemma(arch, metadata, get) if arch in ("gemma2", "gemma3") else {}
        phi3 = _gguf_phi3(metadata, head_dim, get("context_length")) if arch == "phi3" else {}
        if scaling != "none" and not (arch == "gemma3" and scaling == "linear"):
            raise UnsupportedModelError(f"{arch}.rope.scaling.type={scaling!r} is not supported")
        rotary = metadata.get(f"{arch}.rope.dimension_count", head_dim)
        if arch != "phi3" and rotary != head_dim:
            raise UnsupportedModelError(
                f"{arch}.rope.dimension_count={rotary} is not supported: RoPE on part of each head "
                f"(head size {head_dim}) is read from phi3 files only"
            )
        eos = [metadata[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in metadata]
        moe = moe_from_gguf(arch, metadata, get("block_count"))
        return ModelConfig(
            architecture="gemma3_text"
            if arch == "gemma3"
            else _GGUF_MOE_ARCHITECTURES.get(arch, arch)
            if moe
            else arch,
            hidden_size=hidden,
            intermediate_size=get("feed_forward_length", 0 if moe else None),
            num_layers=get("block_count"),
            num_heads=heads,
            num_kv_heads=get("attention.head_count_kv", heads),
            head_dim=head_dim,
            vocab_size=metadata.get(f"{arch}.vocab_size") or len(metadata["tokenizer.ggml.tokens"]),
            rms_norm_eps=get("attention.layer_norm_rms_epsilon"),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            max_position_embeddings=get("context_length"),
            tie_word_embeddings=not has_output_weight,
            attention_bias=arch == "qwen2",
            qk_norm=arch in ("qwen3", "qwen3moe", "gemma3"),
            rope_freq_factors=rope_freq_factors,
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=tuple(dict.fromkeys(eos)),
            moe=moe,
            **gemma,
            **phi3,
        )


def _gguf_gemma(arch: str, metadata: dict[str, Any], get: Any) -> dict[str, Any]:
    """What a Gemma GGUF leaves to the reader, as llama.cpp reads it (``llama_model::load_hparams``): the window
    on every other layer (Gemma 2) or on all but every sixth (Gemma 3); Gemma 2's soft caps, 50 and 30 when
    absent; Gemma 3's local RoPE base of 10,000 and its global layers' linear scaling; and, since the file has no
    ``query_pre_attn_scalar``, scores scaled by hidden_size / heads for the 27B models (46 and 62 layers) and by
    head_dim otherwise."""
    layers, hidden, heads = get("block_count"), get("embedding_length"), get("attention.head_count")
    pattern = 2 if arch == "gemma2" else 6
    scalar = hidden // heads if layers == (46 if arch == "gemma2" else 62) else get("attention.key_length")
    settings: dict[str, Any] = {
        "hidden_act": "gelu_pytorch_tanh",
        "sliding_window": get("attention.sliding_window", 4096 if arch == "gemma2" else None),
        "sliding_layers": tuple(i % pattern < pattern - 1 for i in range(layers)),
        "query_pre_attn_scalar": scalar,
        "final_logit_softcapping": metadata.get(f"{arch}.final_logit_softcapping", 30.0 if arch == "gemma2" else None),
    }
    if arch == "gemma2":
        settings["attn_logit_softcapping"] = get("attn_logit_softcapping", 50.0)
    else:
        settings["rope_local_theta"] = 10000.0
        if metadata.get(f"{arch}.rope.scaling.type", "none") == "linear":
            settings["rope_scaling"] = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
    return settings


def _gguf_phi3(metadata: dict[str, Any], head_dim: int, context_length: int) -> dict[str, Any]:
    """What llama.cpp's converter writes for Phi-3 / Phi-4-mini (``Phi3MiniModel``): RoPE on the first
    ``rope.dimension_count`` features of each head (``partial_rotary_factor`` times head_dim), the window on every
    layer (0 for none: Phi-4's files; one no shorter than the context is none, as for a Hugging Face config).
    LongRoPE files are refused: their ``rope_factors_long``/``rope_factors_short`` tensors by the loader, their
    ``rope.scaling.attn_factor`` here."""
    rotary = metadata.get("phi3.rope.dimension_count", head_dim)
    factor = rotary / head_dim
    if rotary % 2 or not 0 < rotary <= head_dim or int(head_dim * factor) != rotary:
        raise UnsupportedModelError(
            f"phi3.rope.dimension_count={rotary} rotary features of head size {head_dim}: it must be an even "
            "number between 2 and the head size"
        )
    attn_factor = metadata.get("phi3.rope.scaling.attn_factor")
    if attn_factor is not None and attn_factor != 1.0:
        raise UnsupportedModelError(
            f"phi3.rope.scaling.attn_factor={attn_factor} (LongRoPE) is not supported (rope types: "
            f"{', '.join(ROPE_TYPES)})"
        )
    window = metadata.get("phi3.attention.sliding_window") or None
    if window is not None and window >= context_length:
        window = None
    return {"partial_rotary_factor": factor, "sliding_window": window}


def _sliding_window(arch: str, config: dict[str, Any]) -> int | None:
    """The window of the layers that have one (None: full attention everywhere); Qwen's only with
    use_sliding_window."""
    window = config.get("sliding_window")
    if arch == "qwen3_moe" and config.get("use_sliding_window") and window is not None:
        raise UnsupportedModelError(
            f"sliding_window={window} with use_sliding_window is not supported for Qwen3-MoE (not tested there)"
        )
    if arch in ("llama", "qwen3_moe") or (arch in ("qwen2", "qwen3") and not config.get("use_sliding_window")):
        return None
    if window is None or window >= config.get("max_position_embeddings", 0):
        return None
    if window < 1:
        raise UnsupportedModelError(f"sliding_window={window} must be at least 1")
    return int(window)


def _sliding_layers(arch: str, config: dict[str, Any]) -> tuple[bool, ...] | None:
    """Which layers attend within the window: ``layer_types`` where the family reads it, else the family's
    default pattern (Gemma 2: every other layer; Gemma 3: all but every ``sliding_window_pattern``-th; Qwen: the
    layers from ``max_window_layers`` on); None for Mistral, Phi-3 and Mixtral, whose every layer has the window."""
    if arch in ("mistral", "phi3", "mixtral"):
        return None
    layers = config["num_hidden_layers"]
    types = config.get("layer_types")
    if types is None:
        if arch == "gemma2":
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
        elif arch == "gemma3_text":
            pattern = config.get("sliding_window_pattern", 6)
            types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
        else:  # qwen2, qwen3
            first = config.get("max_window_layers", 28)
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    unknown = sorted(set(types) - set(LAYER_TYPES))
    if unknown:
        raise UnsupportedModelError(
            f"layer_types {', '.join(map(repr, unknown))} are not supported (supported: {', '.join(LAYER_TYPES)})"
        )
    return tuple(t == "sliding_attention" for t in types)


def _rope_parameters(arch: str, config: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    """The global layers' RoPE settings, and the sliding-window layers' own base where it differs (Gemma 3:
    ``rope_local_base_freq``, or transformers 5's ``rope_parameters`` per layer type)."""
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    if arch != "gemma3_text":
        return rope, None
    local: dict[str, Any] = {"rope_theta": config.get("rope_local_base_freq", 10000.0)}
    if set(rope) & set(LAYER_TYPES):  # transformers 5: one set of parameters per layer type
        local = dict(rope.get("sliding_attention") or local)
        rope = dict(rope.get("full_attention") or {})
    local_type = local.get("rope_type", "default")
    if local_type != "default":
        raise UnsupportedModelError(
            f"rope_parameters.sliding_attention.rope_type={local_type!r} is not supported (only default)"
        )
    return rope, float(local.get("rope_theta", 10000.0))


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
