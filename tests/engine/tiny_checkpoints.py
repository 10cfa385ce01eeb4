"""Builders for tiny random-weight Hugging Face checkpoints (Llama, GQA Llama, Qwen2...) with a real tokenizer.

Each checkpoint is what ``save_pretrained`` writes (config.json + model.safetensors) plus a byte-level BPE
``tokenizer.json`` trained here on a little text and a ChatML ``chat_template`` (Gemma's own template for the
Gemma families), so engine and tokenizer code load them exactly like a downloaded model. GGUF files are written
from them as llama.cpp's converter writes them, with that vocabulary or with a SentencePiece one trained here on
the same text (Llama 2 / Mistral style). Weights are drawn with a larger spread than transformers' default,
and norm weights and attention biases are randomised too, so that greedy choices are decisive and a wrongly
mapped tensor changes the logits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from sentencepiece_reference import SentencePieceReference
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOS, EOS = "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + message['role']) }}"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Gemma 3's template as google/gemma-3-*-it ship it (a system message folded into the first user turn, the
# assistant's role called "model", contents trimmed, content lists of text parts), images left out.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    '{%- set first_user_prefix = "" -%}'
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- else -%}{{ raise_exception('Invalid content type') }}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
# Qwen2.5-Instruct's template as Qwen/Qwen2.5-*-Instruct ship it: tools listed in the system turn, calls written as
# <tool_call> JSON (hermes), tool results folded into a user turn as <tool_response>.
QWEN_TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    '<args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
    "            {{- tool_call.name }}\n"
    '            {{- \'", "arguments": \' }}\n'
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)
TRAINING_TEXT = [
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome.",
    "Once upon a time there was a little fox who lived in a forest near a river.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "Shoal runs inference fleets: an operator, a gateway, engines with paged KV caches.",
    "Les élèves étudient à l'école. 東京は日本の首都です。 Emoji: 🐟🌊🚀 café naïve",
] * 4


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """Byte-level BPE like GPT-2/SmolLM: every byte is a token, so any text round-trips."""
    tokenizer = Tokenizer(models.BPE(fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 $B:1", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, directory: Path, chat_template: str = CHAT_TEMPLATE) -> None:
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "chat_template": chat_template,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


SPM_CHAT_TEMPLATE = (  # Llama 2's shape: BOS, then [INST] as plain text
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


def train_sentencepiece(vocab_size: int = 400, **options: Any) -> SentencePieceReference:
    """A SentencePiece BPE model trained on ``TRAINING_TEXT`` as Llama 2's was, in a child process that answers
    for SentencePiece (close it when done); ``options`` as ``SentencePieceReference`` takes them."""
    return SentencePieceReference(TRAINING_TEXT, vocab_size, **options)


_TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}  # gguf.TokenType


def add_sentencepiece_vocab(writer: Any, reference: SentencePieceReference) -> None:
    """A SentencePiece model's vocabulary as llama.cpp's converter writes it (``_create_vocab_sentencepiece``):
    every piece with its score and type (user-defined symbols typed as the converter types a checkpoint's added
    tokens), the special ids, BOS added; ``add_space_prefix`` only where it is off, as for Gemma."""
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(reference.pieces)
    writer.add_token_scores(reference.scores)
    writer.add_token_types([_TOKEN_TYPES[kind] for kind in reference.kinds])
    writer.add_bos_token_id(reference.bos_id())
    writer.add_eos_token_id(reference.eos_id())
    writer.add_unk_token_id(reference.unk_id())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if not reference.add_dummy_prefix:
        writer.add_add_space_prefix(False)
    writer.add_chat_template(SPM_CHAT_TEMPLATE)


def build_checkpoint(
    directory: Path, model_type: str, seed: int = 0, chat_template: str | None = None, **config_overrides: Any
) -> Path:
    """Saves a random ``model_type`` ("llama" | "qwen2" | "qwen3" | "phi3" | "mistral" | "gemma2" | "gemma3" |
    "mixtral" | "qwen3_moe") checkpoint with a tokenizer in ``directory``. The mixtures of experts get 4 experts
    (Qwen3-MoE: 6), 2 per token, unless overridden; ``chat_template`` replaces the family's default one."""
    import transformers

    tokenizer = train_tokenizer(vocab_size=384)
    vocab_size = tokenizer.get_vocab_size()
    config_class = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
        "phi3": transformers.Phi3Config,
        "mistral": transformers.MistralConfig,
        "gemma2": transformers.Gemma2Config,
        "gemma3": transformers.Gemma3TextConfig,
        "mixtral": transformers.MixtralConfig,
        "qwen3_moe": transformers.Qwen3MoeConfig,
    }[model_type]
    gemma = model_type.startswith("gemma")
    settings: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        initializer_range=0.1,
        bos_token_id=tokenizer.token_to_id(BOS),
        eos_token_id=tokenizer.token_to_id(EOS),
    )
    if model_type == "mixtral":
        settings.update(num_local_experts=4, num_experts_per_tok=2)
    elif model_type == "qwen3_moe":
        settings.update(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=48)
    settings.update(config_overrides)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config_class(**settings), dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):  # Gemma's norms multiply by 1 + weight
                param.uniform_(-0.5, 0.5) if gemma else param.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.5)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    save_tokenizer(tokenizer, directory, chat_template or (GEMMA_CHAT_TEMPLATE if gemma else CHAT_TEMPLATE))
    return directory


_GGUF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",  # Phi-3's fused Q, K, V rows, written as they are
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",  # Phi-3's gate rows then up rows, llama.cpp's fused SwiGLU input
    "mlp.down_proj.weight": "ffn_down.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",  # Mixtral's router
    "mlp.gate.weight": "ffn_gate_inp.weight",  # Qwen3-MoE's
}
_GGUF_QUANTIZED = tuple(v for k, v in _GGUF_LAYER_NAMES.items() if k.endswith("_proj.weight"))  # ``quantize``'s
# An expert's projection (Mixtral's name or Qwen3-MoE's) -> the GGUF tensor that stacks it with its peers'.
_GGUF_EXPERT_STACKS = {
    "w1": "ffn_gate_exps",
    "gate_proj": "ffn_gate_exps",
    "w3": "ffn_up_exps",
    "up_proj": "ffn_up_exps",
    "w2": "ffn_down_exps",
    "down_proj": "ffn_down_exps",
}


# Checkpoints the engine tests and the Triton engine-parity tests (another folder, another conftest) both use:
# name -> (model_type, settings), so the two build the same model.
SHARED_CHECKPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gqa-llama": ("llama", dict(seed=2, num_key_value_heads=2, tie_word_embeddings=True)),
    "mistral-window": ("mistral", dict(seed=8, num_key_value_heads=2, sliding_window=6)),
    "mixtral": ("mixtral", dict(seed=9, num_key_value_heads=2)),
    "gemma2": (
        "gemma2",
        dict(
            seed=9,
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=16,
            query_pre_attn_scalar=24,
            sliding_window=6,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=5.0,
        ),
    ),
}


def build_shared_checkpoint(directory: Path, name: str) -> Path:
    """One of ``SHARED_CHECKPOINTS`` in ``directory``."""
    model_type, settings = SHARED_CHECKPOINTS[name]
    return build_checkpoint(directory, model_type, **settings)


def llama_cpp_permute(weight: Any, num_heads: int) -> Any:
    """llama.cpp's converter (``LlamaModel.permute``): each head's two rotary halves interleaved row by row."""
    rows = weight.shape[0]
    return weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def llama3_rope_factors(rope: dict[str, Any], head_dim: int) -> Any:
    """What llama.cpp's converter writes as ``rope_freqs.weight`` for Llama 3.1 scaling (its
    ``generate_extra_tensors``): per frequency, 1 for short wavelengths, ``factor`` for long ones, a blend between."""
    import numpy as np

    freqs = 1.0 / (rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old_context = rope["original_max_position_embeddings"]
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def add_byte_level_vocab(writer: Any, config: dict[str, Any], tokenizer: dict[str, Any], chat_template: str) -> None:
    """The checkpoint's byte-level BPE vocabulary as llama.cpp's converter writes a ``gpt2`` tokenizer."""
    vocab = sorted(tokenizer["model"]["vocab"].items(), key=lambda item: item[1])
    specials = {t["content"] for t in tokenizer["added_tokens"] if t["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([3 if token in specials else 1 for token, _ in vocab])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_add_bos_token(True)
    writer.add_chat_template(chat_template)


_GEMMA_GGUF_NAMES = _GGUF_LAYER_NAMES | {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def write_gemma_gguf(hf_dir: Path, path: Path) -> Path:
    """Converts a tiny Gemma 2 or Gemma 3 checkpoint to a GGUF as llama.cpp's converter does
    (``Gemma2Model`` / ``Gemma3Model``): the hyperparameters it writes (no ``query_pre_attn_scalar``, no layer
    pattern: the reader assumes them), every norm weight with Gemma's 1 added, no LM head (tied)."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((hf_dir / "config.json").read_text())
    architecture = "gemma2" if config["model_type"] == "gemma2" else "gemma3"
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_sliding_window(config["sliding_window"])
    writer.add_vocab_size(config["vocab_size"])
    if architecture == "gemma2":
        writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    else:
        full = config["rope_parameters"]["full_attention"]
        writer.add_rope_freq_base(full["rope_theta"])
        if full["rope_type"] == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(full["factor"])
    add_byte_level_vocab(writer, config, json.loads((hf_dir / "tokenizer.json").read_text()), GEMMA_CHAT_TEMPLATE)
    for name, array in load_file(hf_dir / "model.safetensors").items():
        if name.endswith("norm.weight"):
            array = array + 1
        if name == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", array)
        elif name == "model.norm.weight":
            writer.add_tensor("output_norm.weight", array)
        elif name != "lm_head.weight":
            _, _, layer, rest = name.split(".", 3)
            writer.add_tensor(f"blk.{layer}.{_GEMMA_GGUF_NAMES[rest]}", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def add_phi3_parameters(writer: Any, config: dict[str, Any]) -> None:
    """What ``Phi3MiniModel.set_gguf_parameters`` / ``generate_extra_tensors`` add to the common hyperparameters."""
    import numpy as np

    rope = config["rope_parameters"]
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    rope_dims = int(rope.get("partial_rotary_factor", 1.0) * hidden) // heads
    original_context = rope.get("original_max_position_embeddings", config["original_max_position_embeddings"])
    writer.add_rope_dimension_count(rope_dims)
    writer.add_rope_scaling_orig_ctx_len(original_context)
    writer.add_sliding_window(config.get("sliding_window") or 0)
    if rope.get("long_factor"):
        scale = config["max_position_embeddings"] / original_context
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original_context)))
        writer.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
        writer.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))


def write_llama_gguf(
    hf_dir: Path,
    path: Path,
    architecture: str = "llama",
    quantize: str | None = None,
    embedding: str | None = None,
    rope_freqs: bool = True,
    sentencepiece: SentencePieceReference | None = None,
) -> Path:
    """Converts a tiny Llama checkpoint to a GGUF the way llama.cpp's converter lays it out (Llama 3.1 RoPE
    scaling as a ``rope_freqs`` tensor, as it does); ``quantize``
    ("Q4_0", "Q4_1", ...) stores the layers' projection weights in that type (the experts' stacks too),
    ``embedding`` ("Q8_0", as SmolLM2's file) the token embedding (the tied LM head), the rest stays float;
    ``rope_freqs=False`` leaves the scaling out (a wrong file, for tests that must tell the difference). A
    mixture of experts (Mixtral as ``llama``, Qwen3-MoE as ``qwen3moe``) gets llama.cpp's expert counts and each
    layer's experts stacked (``blk.N.ffn_gate_exps`` ``[experts, intermediate, hidden]``...). ``sentencepiece``
    (from ``train_sentencepiece``, as many pieces as the checkpoint's vocab_size) is written as the vocabulary in
    place of the checkpoint's byte-level one. A Phi-3 checkpoint (``architecture="phi3"``) is written as
    ``Phi3MiniModel`` writes it: fused ``attn_qkv`` and ``ffn_up`` as stored, the rotary features per head
    (``rope.dimension_count``), the window (0 for none) and original context, and LongRoPE's
    ``rope_factors_long`` / ``rope_factors_short`` with its attention factor where the config has them."""
    import gguf
    import numpy as np
    from gguf.quants import quantize as quantize_blocks
    from safetensors.numpy import load_file

    config = json.loads((hf_dir / "config.json").read_text())
    tokenizer = json.loads((hf_dir / "tokenizer.json").read_text())
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    if config.get("head_dim"):
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    if config["model_type"] in ("mixtral", "qwen3_moe"):
        writer.add_expert_count(config["num_local_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
        if config["model_type"] == "qwen3_moe":
            writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if architecture == "phi3":
        add_phi3_parameters(writer, config)
    if rope_freqs and config["rope_parameters"].get("rope_type") == "llama3":
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(config["rope_parameters"], head_dim))

    if sentencepiece is not None:
        add_sentencepiece_vocab(writer, sentencepiece)
    else:
        add_byte_level_vocab(writer, config, tokenizer, CHAT_TEMPLATE)

    def add_layer_tensor(name: str, array: Any) -> None:
        if quantize and name.endswith(("_exps.weight", *_GGUF_QUANTIZED)):
            qtype = gguf.GGMLQuantizationType[quantize]
            writer.add_tensor(name, quantize_blocks(array.astype("float32"), qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, array)

    experts: dict[tuple[str, str], dict[int, Any]] = {}
    for name, array in load_file(hf_dir / "model.safetensors").items():
        parts = name.split(".")
        if "experts" in parts:  # model.layers.L.{block_sparse_moe,mlp}.experts.E.PROJ.weight
            layer, expert, proj = parts[2], int(parts[5]), parts[6]
            experts.setdefault((layer, _GGUF_EXPERT_STACKS[proj]), {})[expert] = array
        elif name == "model.embed_tokens.weight" and embedding:
            qtype = gguf.GGMLQuantizationType[embedding]
            writer.add_tensor("token_embd.weight", quantize_blocks(array.astype("float32"), qtype), raw_dtype=qtype)
        elif name == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", array)
        elif name == "model.norm.weight":
            writer.add_tensor("output_norm.weight", array)
        elif name == "lm_head.weight":
            writer.add_tensor("output.weight", array)
        else:
            _, _, layer, rest = name.split(".", 3)
            if architecture == "llama" and rest == "self_attn.q_proj.weight":  # Qwen's are written as they are
                array = llama_cpp_permute(array, heads)
            elif architecture == "llama" and rest == "self_attn.k_proj.weight":
                array = llama_cpp_permute(array, kv_heads)
            add_layer_tensor(f"blk.{layer}.{_GGUF_LAYER_NAMES[rest]}", array)
    for (layer, stack), by_expert in experts.items():
        add_layer_tensor(f"blk.{layer}.{stack}.weight", np.stack([by_expert[e] for e in sorted(by_expert)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
