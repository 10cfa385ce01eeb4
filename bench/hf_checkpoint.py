"""Writes the bundled SmolLM2 GGUF as a bf16 Hugging Face directory: the same weights for servers that read only
Hugging Face checkpoints (vLLM's CPU build), and for ``shoal serve`` on that format.

transformers loads the GGUF (``from_pretrained(dir, gguf_file=...)``, dequantizing its Q4_1 weights), the state
dict is copied into a model built ``from_config`` without the ``quantization_config`` (a GGUF-loaded model refuses
``save_pretrained``), and that is saved in bf16 with the tokenizer transformers rebuilds from the GGUF:
``config.json``, ``generation_config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``.
Cached under ``$SHOAL_CACHE/checkpoints/<model>-bf16`` (default ``~/.cache/shoal``) once, with a ``.complete``
marker; prints the directory::

    .venv/bin/python bench/hf_checkpoint.py [--model smollm2-135m] [--out DIR] [--force]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

MARKER = ".complete"


def default_dir(model: str) -> Path:
    cache = Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")
    return cache / "checkpoints" / f"{model}-bf16"


def is_complete(out: Path) -> bool:
    return (out / MARKER).is_file() and (out / "config.json").is_file()


def convert(model: str, out: Path) -> None:
    """Writes ``model``'s GGUF as a bf16 Hugging Face directory at ``out`` (which must not exist)."""
    import torch
    import transformers

    from shoal.model_registry import resolve_model

    source = resolve_model(model)
    if source.format != "gguf":
        raise SystemExit(f"{model} resolves to {source.path}, not a GGUF file")
    gguf = source.path
    loaded = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # A tied LM head is no tensor of its own; anything else left unset would be random weights.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"state dicts differ: missing {missing}, unexpected {unexpected}")
    plain.generation_config = loaded.generation_config
    plain.eval().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def ensure(model: str = "smollm2-135m", out: Path | None = None, force: bool = False) -> Path:
    """The converted directory, written once (concurrent callers wait on a lock)."""
    out = (out or default_dir(model)).resolve()
    if is_complete(out) and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(out) and not force:
            return out
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            convert(model, work / "model")
            (work / "model" / MARKER).touch()
            if out.exists():
                shutil.rmtree(out)
            (work / "model").rename(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a bundled GGUF model's name")
    parser.add_argument("--out", type=Path, default=None, help="default: $SHOAL_CACHE/checkpoints/<model>-bf16")
    parser.add_argument("--force", action="store_true", help="convert again even when the directory is complete")
    args = parser.parse_args()
    print(ensure(args.model, args.out, args.force))


if __name__ == "__main__":
    main()
