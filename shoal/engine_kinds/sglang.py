"""SGLang's server (``python3 -m sglang.launch_server``): ``gpus`` > 1 is tensor parallelism (``--tp-size``),
``blockSize`` its ``--page-size``. It sizes its KV pool as a fraction of GPU memory or in tokens, never in bytes,
so ``kvCacheMemory`` is refused; ``gpuMemoryUtilization`` is that fraction (``--mem-fraction-static``). ``/health`` answers 503 until the server is up; metrics need
``--enable-metrics``.
"""

from __future__ import annotations

from shoal.engine_kinds.adapter import (
    EngineAdapter,
    EngineSettings,
    MetricMap,
    flag,
    no_adapters,
    no_bundled_alias,
    optional,
    unset,
)


def command(s: EngineSettings) -> list[str]:
    args = ["python3", "-m", "sglang.launch_server", "--model-path", s.model, "--served-model-name", s.served_name]
    args += ["--host", s.host, "--port", str(s.port), "--dtype", s.dtype, "--enable-metrics"]
    args += optional("--download-dir", s.download_dir) + optional("--page-size", s.block_size)
    args += optional("--context-length", s.max_model_len) + optional("--max-running-requests", s.max_num_seqs)
    args += optional("--mem-fraction-static", s.gpu_memory_utilization) + flag("--disable-cuda-graph", s.enforce_eager)
    if s.gpus > 1:
        args += ["--tp-size", str(s.gpus)]
    if s.gpus == 0:
        args += ["--device", "cpu"]
    return args


SGLANG = EngineAdapter(
    kind="sglang",
    binary="python3",
    ready_path="/health",
    live_path="/health",
    metrics=MetricMap(
        waiting="sglang:num_queue_reqs",
        running="sglang:num_running_reqs",
        kv_usage="sglang:token_usage",
        ttft="sglang:time_to_first_token_seconds",
        itl="sglang:inter_token_latency_seconds",
        finished="sglang:num_requests",
        generated="sglang:generation_tokens",
        prefix_hit_tokens="sglang:cached_tokens",
        prefix_query_tokens="sglang:prompt_tokens",
    ),
    command=command,
    refusals=(
        no_bundled_alias("sglang"),
        unset(
            "kvCacheMemory",
            "SGLang sizes its KV pool as a fraction of GPU memory (--mem-fraction-static) or in tokens "
            "(--max-total-tokens), not in bytes; set gpuMemoryUtilization, or pass --max-total-tokens in engine.extraArgs",
        ),
        no_adapters(
            "SGLang's OpenAI API names an adapter as BASE:ADAPTER in model (or lora_path), not by the adapter's own "
            "name, which is what the gateway routes; pass --lora-paths in engine.extraArgs to use them that way"
        ),
    ),
)
