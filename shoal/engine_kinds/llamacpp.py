"""llama.cpp's ``llama-server``: one GGUF, ``maxNumSeqs`` parallel slots (``-np``) of ``maxModelLen`` tokens each
(``-c`` is the context of all slots together). It runs the GGUF's own types and has no KV block size, byte
budget, memory fraction or tensor parallelism, so ``dtype`` other than auto, ``blockSize``, ``kvCacheMemory``,
``gpuMemoryUtilization``, ``enforceEager``, ``kernelCache`` (it compiles nothing at start-up) and ``gpus`` > 1 are refused. ``/health`` answers 503 while the model loads; ``/metrics`` needs ``--metrics``, and exports
neither a TTFT histogram, nor a finished-request counter, nor KV use: those signals stay missing.
"""

from __future__ import annotations

from shoal.engine_kinds.adapter import (
    EngineAdapter,
    EngineSettings,
    MetricMap,
    at_most_one_gpu,
    dtype_auto,
    no_adapters,
    no_bundled_alias,
    not_true,
    optional,
    unset,
)


def command(s: EngineSettings) -> list[str]:
    args = ["llama-server", "--model", s.model, "--alias", s.served_name, "--host", s.host, "--port", str(s.port)]
    args += ["--metrics", *optional("--parallel", s.max_num_seqs)]
    if s.max_model_len is not None:
        args += ["--ctx-size", str(s.max_model_len * (s.max_num_seqs or 1))]
    if s.gpus:
        args += ["--n-gpu-layers", "999"]
    return args


LLAMACPP = EngineAdapter(
    kind="llamacpp",
    binary="llama-server",
    ready_path="/health",
    live_path="/health",
    metrics=MetricMap(
        waiting="llamacpp:requests_deferred",
        running="llamacpp:requests_processing",
        kv_usage=None,
        ttft=None,
        finished=None,
        generated="llamacpp:tokens_predicted",
        prefix_hit_tokens="llamacpp:prompt_tokens_cached",
        prefix_query_tokens=None,  # its prompt_tokens count only the uncached ones
    ),
    command=command,
    image_binary="/app/llama-server",  # ghcr.io/ggml-org/llama.cpp:server* keep it in /app, off PATH
    refusals=(
        no_bundled_alias("llamacpp"),
        dtype_auto("llama-server computes in the GGUF's own types"),
        unset("blockSize", "llama-server's KV cache has no blocks"),
        unset(
            "kvCacheMemory",
            "llama-server sizes its KV cache in tokens: maxModelLen per slot times maxNumSeqs slots",
        ),
        unset(
            "gpuMemoryUtilization",
            "llama-server has no GPU-memory fraction: its KV cache is maxModelLen tokens per slot times maxNumSeqs",
        ),
        not_true(
            "enforceEager",
            "llama-server has no flag for it; its CUDA build turns its graphs off with GGML_CUDA_DISABLE_GRAPHS=1 "
            "in engine.env",
        ),
        unset("kernelCache", "llama-server's kernels are built into its binary: it compiles none at start-up"),
        at_most_one_gpu("llama-server offloads layers to one GPU here, with no tensor parallelism"),
        no_adapters(
            "llama-server loads LoRA adapters as GGUF files (--lora) chosen per request by index, not PEFT "
            "directories each served under a model name of its own"
        ),
    ),
)
