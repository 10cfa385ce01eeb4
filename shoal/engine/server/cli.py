"""``shoal serve``: the engine behind an OpenAI-compatible HTTP API. Imports nothing heavy until it runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="Serve a model over an OpenAI-compatible HTTP API.")
    p.add_argument(
        "--model",
        required=True,
        help="bundled alias (smollm2-135m), a HF directory or .gguf path, or a source fetched first: "
        "hf://ORG/REPO[@REVISION][/FILE.gguf], s3://BUCKET/PREFIX, s3://BUCKET/KEY.gguf",
    )
    p.add_argument(
        "--download-dir",
        type=Path,
        default=None,
        help="where hf:// and s3:// models are cached (default: $SHOAL_MODEL_CACHE, else ~/.cache/shoal/models)",
    )
    p.add_argument(
        "--served-model-name",
        action="append",
        default=None,
        help="name clients use (repeatable); default: the model's own name and --model",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    engine = p.add_argument_group("engine")
    engine.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="auto: bf16 on CPUs with native bf16 (avx512_bf16/AMX), else fp32; on CUDA the "
        "checkpoint's half-precision dtype",
    )
    engine.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="auto: cuda when a CUDA GPU is available, else cpu",
    )
    engine.add_argument(
        "--quantization",
        default="auto",
        choices=("auto", "none", "int4", "int8"),
        help="weight-only quantized copies for small decode batches (CPU, bf16); auto: int4 "
        "for a GGUF file with Q4_0/Q4_1 weights, none otherwise",
    )
    engine.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads; default: chosen per step, all CPUs or all but one (left to the event loop), "
        "whichever is measured faster for that kind of step",
    )
    engine.add_argument("--block-size", type=int, default=16)
    engine.add_argument("--max-num-batched-tokens", type=int, default=2048)
    engine.add_argument("--max-num-seqs", type=int, default=128)
    engine.add_argument("--num-kv-blocks", type=int, default=None)
    engine.add_argument(
        "--kv-cache-bytes", type=int, default=None, help="the KV cache's size, overriding --gpu-memory-utilization"
    )
    engine.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="on a GPU, the fraction of its memory the engine may use: the KV cache takes what the weights and a "
        "profiling forward at --max-num-batched-tokens leave of it (vLLM's meaning); no effect on a CPU, "
        "whose KV cache is 512 MiB unless --kv-cache-bytes says otherwise",
    )
    engine.add_argument("--max-model-len", type=int, default=None)
    engine.add_argument(
        "--enforce-eager",
        action="store_true",
        help="run every step eagerly (vLLM's meaning): on a GPU, decode steps otherwise replay CUDA graphs captured "
        "at start-up; a CPU never uses graphs, so there it has no effect",
    )
    engine.add_argument("--no-prefix-caching", dest="enable_prefix_caching", action="store_false")
    engine.add_argument("--attention-backend", default=None, choices=("torch", "cpu", "triton"))
    engine.add_argument("--seed", type=int, default=0)
    engine.add_argument(
        "--weights-cache-dir",
        default=None,
        metavar="DIR",
        help="keep the converted weights (dequantized, fused, laid out for the kernels) in DIR, keyed by the "
        "model file, the settings and the CPU, so the next start maps them instead of converting; default (or an "
        "empty DIR): off (shoal up: $SHOAL_CACHE/converted-weights; the operator: /model-cache/.converted with "
        "spec.model.cache)",
    )
    lora = p.add_argument_group("LoRA adapters (docs/lora.md)")
    lora.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters; a request names one as model")
    lora.add_argument("--max-loras", type=int, default=1, help="adapters in one batch at most (slots)")
    lora.add_argument("--max-lora-rank", type=int, default=16, help="the highest adapter rank accepted")
    lora.add_argument(
        "--lora-modules",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=PATH",
        help="adapters (PEFT directories) loaded at start-up, served as NAME (repeatable)",
    )
    lora.add_argument(
        "--lora-modules-file",
        default=None,
        metavar="PATH",
        help='a JSON list of {"name", "path"} adapters loaded after the model and before /ready; one the '
        "engine refuses is logged and skipped (the operator's ConfigMap of spec.adapters)",
    )
    lora.add_argument(
        "--allow-runtime-lora-updating",
        action="store_true",
        help="serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING)",
    )
    server = p.add_argument_group("server")
    server.add_argument(
        "--max-waiting-requests",
        type=int,
        default=512,
        help="requests waiting for the batch beyond which new ones get 503",
    )
    server.add_argument(
        "--request-timeout", type=float, default=600.0, help="seconds a request may generate before it is aborted"
    )
    server.add_argument("--max-body-bytes", type=int, default=1024 * 1024)
    server.add_argument(
        "--ignore-unknown-fields",
        action="store_true",
        help="accept (and log) request fields OpenAI's API does not define, as vLLM does; default: a 400 naming them",
    )
    server.add_argument(
        "--tool-call-parser",
        default=None,
        choices=("hermes", "llama3_json", "mistral"),
        help="the format the model writes tool calls in (vLLM's names); default: the one its chat template shows",
    )
    server.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help='let the model choose whether to call a tool (tool_choice "auto", the default when tools are given), '
        "as vLLM's flag does; without it such requests are a 400 (required and named choices work either way)",
    )
    server.add_argument(
        "--stream-buffer", type=int, default=64, help="pending output chunks per request before they are merged"
    )
    server.add_argument(
        "--shutdown-grace", type=float, default=30.0, help="seconds in-flight requests may finish after SIGTERM"
    )
    server.add_argument("--log-level", default="info")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from shoal.engine.server.serve_main import run

    return run(args)
