"""vLLM's OpenAI server (``vllm serve``): every field has a flag, ``gpus`` > 1 is tensor parallelism.

``kvCacheMemory`` is ``--kv-cache-memory-bytes``, which the CPU build honours too (it is what its
``VLLM_CPU_KVCACHE_SPACE`` sets). ``/health`` answers 200 once the engine core is up; the port opens only after
the model is loaded. Metrics are on by default.
"""

from __future__ import annotations

from shoal.engine_kinds.adapter import EngineAdapter, EngineSettings, MetricMap, no_bundled_alias, optional


def command(s: EngineSettings) -> list[str]:
    args = ["vllm", "serve", s.model, "--served-model-name", s.served_name, "--host", s.host, "--port", str(s.port)]
    args += ["--dtype", s.dtype, *optional("--download-dir", s.download_dir)]
    args += optional("--block-size", s.block_size) + optional("--max-model-len", s.max_model_len)
    args += optional("--max-num-seqs", s.max_num_seqs) + optional("--kv-cache-memory-bytes", s.kv_cache_bytes)
    args += optional("--gpu-memory-utilization", s.gpu_memory_utilization)
    if s.gpus > 1:
        args += ["--tensor-parallel-size", str(s.gpus)]
    return args


VLLM = EngineAdapter(
    kind="vllm",
    binary="vllm",
    ready_path="/health",
    live_path="/health",
    metrics=MetricMap(
        waiting="vllm:num_requests_waiting",
        running="vllm:num_requests_running",
        kv_usage="vllm:kv_cache_usage_perc",  # a 0-1 ratio despite its name (before v0.10: gpu_cache_usage_perc)
        ttft="vllm:time_to_first_token_seconds",
        finished="vllm:request_success",
        generated="vllm:generation_tokens",
        prefix_hit_tokens="vllm:prefix_cache_hits",
        prefix_query_tokens="vllm:prefix_cache_queries",
    ),
    command=command,
    refusals=(no_bundled_alias("vllm"),),
)
