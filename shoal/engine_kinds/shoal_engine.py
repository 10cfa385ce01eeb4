"""Shoal's own engine: ``shoal serve``; every field honoured but tensor parallelism (one GPU per engine)."""

from __future__ import annotations

from shoal.engine_kinds.adapter import (
    EngineAdapter,
    EngineSettings,
    MetricMap,
    at_most_one_gpu,
    flag,
    lora_args,
    optional,
)

ONE_GPU_MESSAGE = (
    "more than 1 GPU: Shoal's engine runs a model on one GPU and does not yet shard it across several (tensor "
    "parallelism), so the others would be requested and left idle; kinds vllm and sglang shard over them"
)
DEFAULT_BLOCK_SIZE = 16


def command(s: EngineSettings) -> list[str]:
    args = ["shoal", "serve", "--model", s.model, *optional("--download-dir", s.download_dir)]
    args += ["--served-model-name", s.served_name, "--host", s.host, "--port", str(s.port), "--dtype", s.dtype]
    args += ["--block-size", str(s.block_size or DEFAULT_BLOCK_SIZE)]
    args += optional("--max-num-seqs", s.max_num_seqs)
    args += ["--device", "cuda" if s.gpus else "cpu"]
    if s.gpus:
        args += ["--attention-backend", "triton"]
    # a CPU engine keeps its default attention: shoal's C kernel where it builds, else torch's (one warning)
    args += optional("--max-model-len", s.max_model_len) + optional("--kv-cache-bytes", s.kv_cache_bytes)
    return (
        args
        + optional("--gpu-memory-utilization", s.gpu_memory_utilization)
        + flag("--enforce-eager", s.enforce_eager)
        + optional("--shutdown-grace", s.shutdown_grace_s)
        + optional("--weights-cache-dir", s.weights_cache_dir)
        + lora_args(s)
        + runtime_lora_args(s)
    )


def runtime_lora_args(s: EngineSettings) -> list[str]:
    """Adapters from a file at start, then loaded and unloaded at run time (the operator's ``spec.adapters``)."""
    if s.lora_modules_file is None:
        return []
    return ["--lora-modules-file", s.lora_modules_file, "--allow-runtime-lora-updating"]


SHOAL = EngineAdapter(
    kind="shoal",
    binary="shoal",
    ready_path="/ready",
    live_path="/health",
    metrics=MetricMap(
        waiting="shoal_engine_requests_waiting",
        running="shoal_engine_requests_running",
        kv_usage="shoal_engine_kv_cache_usage_ratio",
        ttft="shoal_engine_time_to_first_token_seconds",
        itl="shoal_engine_inter_token_latency_seconds",
        finished="shoal_engine_requests_finished",
        generated="shoal_engine_generation_tokens",
        prefix_hit_tokens="shoal_engine_prefix_cache_hits_tokens",
        prefix_query_tokens="shoal_engine_prefix_cache_queries_tokens",
        max_num_seqs="shoal_engine_max_num_seqs",
        # "draining" rejections are retried on another replica and "invalid" ones are not load
        rejected=("shoal_engine_requests_rejected", "reason", "queue_full"),
    ),
    command=command,
    refusals=(at_most_one_gpu(ONE_GPU_MESSAGE),),
    kv_events="sse",
    gateway_validates=True,
)
