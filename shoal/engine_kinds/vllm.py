"""vLLM's OpenAI server (``vllm serve``): every field has a flag, ``gpus`` > 1 is tensor parallelism.

``kvCacheMemory`` is ``--kv-cache-memory-bytes``, which the CPU build honours too (it is what its
``VLLM_CPU_KVCACHE_SPACE`` sets). ``/health`` answers 200 once the engine core is up; the port opens only after
the model is loaded. Metrics are on by default.

With a ``kv_events_port`` (the operator's pods, each ``shoal up`` engine) vLLM publishes its prefix cache: a ZMQ
PUB socket bound on that port, topic ``KV_EVENTS_TOPIC``, and its replay socket (a ROUTER that resends its last
batches) on the next port (``--kv-events-config``), which the gateway follows (``shoal.gateway.vllm_kv_follower``). Its block hashes are then mapped onto Shoal's, which needs vLLM's block size
to be the one the gateway hashes with: ``--block-size`` is then always given, ``blockSize`` or vLLM's own default
on the device (16 tokens on a GPU, 128 on a CPU, whose attention takes only multiples of 32), and the gateway is
given the same (``EngineAdapter.block_size``).
"""

from __future__ import annotations

import json

from shoal.engine_kinds.adapter import (
    EngineAdapter,
    EngineSettings,
    MetricMap,
    flag,
    lora_args,
    no_bundled_alias,
    optional,
)

KV_EVENTS_PORT = 5557  # vLLM's default endpoint's port; the engine pods' port named KV_EVENTS_PORT_NAME
KV_EVENTS_PORT_NAME = "kv-events"
KV_REPLAY_PORT_NAME = "kv-replay"  # always the events port + 1
KV_EVENTS_TOPIC = "kv-events"
KV_EVENTS_FLAG = "--kv-events-config"
BLOCK_SIZES = (16, 128)  # vLLM's defaults: on a GPU, on a CPU


def kv_events_args(port: int) -> list[str]:
    """vLLM's flag publishing its KV cache events on ``port`` (every interface), topic ``KV_EVENTS_TOPIC``, with
    its replay socket on ``port + 1``."""
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{port}",
        "replay_endpoint": f"tcp://*:{port + 1}",
        "topic": KV_EVENTS_TOPIC,
    }
    return [KV_EVENTS_FLAG, json.dumps(config, separators=(",", ":"))]


def command(s: EngineSettings) -> list[str]:
    args = ["vllm", "serve", s.model, "--served-model-name", s.served_name, "--host", s.host, "--port", str(s.port)]
    args += ["--dtype", s.dtype, *optional("--download-dir", s.download_dir)]
    known = s.block_size or (BLOCK_SIZES[0 if s.gpus else 1] if s.kv_events_port is not None else None)
    args += optional("--block-size", known) + optional("--max-model-len", s.max_model_len)
    args += optional("--max-num-seqs", s.max_num_seqs) + optional("--kv-cache-memory-bytes", s.kv_cache_bytes)
    args += optional("--gpu-memory-utilization", s.gpu_memory_utilization) + flag("--enforce-eager", s.enforce_eager)
    if s.gpus > 1:
        args += ["--tensor-parallel-size", str(s.gpus)]
    if s.kv_events_port is not None:
        args += kv_events_args(s.kv_events_port)
    return args + lora_args(s)


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
        itl="vllm:inter_token_latency_seconds",
        finished="vllm:request_success",
        generated="vllm:generation_tokens",
        prefix_hit_tokens="vllm:prefix_cache_hits",
        prefix_query_tokens="vllm:prefix_cache_queries",
    ),
    command=command,
    refusals=(no_bundled_alias("vllm"),),
    kv_events="zmq",
    default_block_size=BLOCK_SIZES,
)
