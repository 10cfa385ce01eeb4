"""``shoal generate``: complete one prompt with the offline engine and print the text.

Light at import time (argparse only): ``shoal`` imports every area's ``cli`` to build its parser.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="complete a prompt with the engine, offline")
    parser.add_argument("prompt", help="the text to complete")
    parser.add_argument(
        "--model",
        default="smollm2-135m",
        help="model alias, Hugging Face directory or .gguf file, or hf:// / s3:// source (fetched first)",
    )
    parser.add_argument(
        "--download-dir",
        type=Path,
        default=None,
        help="where hf:// and s3:// models are cached (default: $SHOAL_MODEL_CACHE, else ~/.cache/shoal/models)",
    )
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--quantization", default="auto", choices=("auto", "none", "int4", "int8"))
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="on a GPU, the fraction of its memory the engine may use (vLLM's meaning); no effect on a CPU",
    )
    parser.add_argument(
        "--enforce-eager",
        action="store_true",
        help="no CUDA graphs for decode steps (vLLM's meaning); no effect on a CPU, which never uses them",
    )
    parser.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    parser.set_defaults(func=_generate)


def _generate(args: argparse.Namespace) -> int:
    from shoal.engine import LLM, SamplingParams
    from shoal.fetch import FetchError, SourceError, default_download_dir, fetch

    try:
        model = fetch(args.model, args.download_dir or default_download_dir()).path  # as it is unless remote
    except FetchError as exc:
        print(f"shoal generate: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, SourceError) else 1
    try:
        params = SamplingParams(
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            max_tokens=args.max_tokens,
        )
        llm = LLM(
            model,
            dtype=args.dtype,
            device=args.device,
            quantization=args.quantization,
            gpu_memory_utilization=args.gpu_memory_utilization,
            enforce_eager=args.enforce_eager,
        )
        if args.chat:
            (output,) = llm.chat([{"role": "user", "content": args.prompt}], params)
        else:
            (output,) = llm.generate(args.prompt, params)
    except (ValueError, OSError) as exc:
        print(f"shoal generate: error: {exc}", file=sys.stderr)
        return 2
    print(output.text)
    return 0
