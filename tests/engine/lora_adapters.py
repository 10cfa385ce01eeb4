"""Random PEFT LoRA adapters for a tiny checkpoint, written by ``peft`` itself, and transformers+peft's reference.

``init_lora_weights=False`` draws both A and B at random (PEFT's default leaves B zero, a no-op adapter), so every
adapter visibly changes the model's greedy choices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def write_adapter(base_dir: Path, directory: Path, seed: int, **lora: Any) -> Path:
    """Saves a random LoRA adapter of the checkpoint in ``base_dir`` (``lora``: ``LoraConfig`` options)."""
    import peft
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = peft.LoraConfig(init_lora_weights=False, **lora)
    peft.get_peft_model(model, config).save_pretrained(directory)
    return directory


def merged_model(base_dir: Path, adapter_dir: Path | None) -> Any:
    """transformers' model with the adapter merged into its weights (the base model alone without one)."""
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = peft.PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    return model.eval()


def greedy_reference(model: Any, prompt: list[int], max_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and the log-softmax each was chosen from, by full forwards (no cache to get wrong)."""
    tokens: list[int] = []
    logprobs: list[torch.Tensor] = []
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = model(torch.tensor([prompt + tokens])).logits[0, -1].float()
            logprobs.append(torch.log_softmax(logits, -1))
            tokens.append(int(logits.argmax()))
    return tokens, logprobs
