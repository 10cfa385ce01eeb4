"""Builders for tiny random-weight Hugging Face checkpoints (Llama, GQA Llama, Qwen2...) with a real tokenizer.

Each checkpoint is what ``save_pretrained`` writes (config.json + model.safetensors) plus a byte-level BPE
``tokenizer.json`` trained here on a little text and a ChatML ``chat_template``, so engine and tokenizer code
load them exactly like a downloaded model. Weights are drawn with a larger spread than transformers' default,
and norm weights and attention biases are randomised too, so that greedy choices are decisive and a wrongly
mapped tensor changes the logits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
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


def save_tokenizer(tokenizer: Tokenizer, directory: Path) -> None:
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


def build_checkpoint(directory: Path, model_type: str, seed: int = 0, **config_overrides: Any) -> Path:
    """Saves a random ``model_type`` ("llama" | "qwen2" | "mistral") checkpoint with a tokenizer in ``directory``."""
    import transformers

    tokenizer = train_tokenizer(vocab_size=384)
    vocab_size = tokenizer.get_vocab_size()
    config_class = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "mistral": transformers.MistralConfig,
    }[model_type]
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
    settings.update(config_overrides)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config_class(**settings), dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.5)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    save_tokenizer(tokenizer, directory)
    return directory
