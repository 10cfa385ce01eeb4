"""The ``shoal serve`` process: builds the engine, the app and uvicorn from its options, and drains on SIGTERM.

uvicorn's own SIGTERM handling closes the listening socket and waits for open connections, so clients of a
terminating pod would see refused connections instead of a clean 503. ``DrainingServer`` takes the first
SIGTERM/SIGINT itself: ``/ready`` turns false, new requests get 503 + ``Retry-After``, in-flight requests
get ``--shutdown-grace`` seconds before they are aborted, and only then does uvicorn stop. A second signal ends
the grace period: what is still streaming is aborted at once, each stream with a clean end, and the server exits;
a third is uvicorn's own (it stops without waiting for the streams).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from types import FrameType

import torch
import uvicorn

from shoal.cpu_features import cpu_info
from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.engine_core import EngineCore
from shoal.engine.core.heap import load_then_freeze
from shoal.engine.core.startup_plan import plan_hardware
from shoal.engine.core.step_threads import StepThreads
from shoal.engine.hardware import choose_threads, threads_per_step
from shoal.engine.server.app import ServerSettings, build_app
from shoal.engine.server.async_engine import AsyncEngine
from shoal.engine.server.kv_event_hub import KVEventHub
from shoal.engine.server.lora_file import load_modules, read_modules_file
from shoal.engine.server.metrics import ServerMetrics
from shoal.engine.server.request_context import RequestIdLogFilter
from shoal.engine.tool_parsers import ToolParserSettings
from shoal.fetch import FetchError, SourceError, local_path
from shoal.model_registry import ModelNotFoundError, resolve_model

log = logging.getLogger(__name__)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, engine: AsyncEngine, grace_s: float) -> None:
        super().__init__(config)
        self._engine = engine
        self._grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Future[None] | None = None
        self._grace_ended = False  # a second signal ended the drain's grace period
        self.exit_code = 0

    def stop_after_engine_death(self) -> None:
        """The engine cannot serve any more: exit non-zero so the pod (or the user) sees it."""
        self.exit_code = 1
        self.should_exit = True

    async def serve(self, sockets: list | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or self._grace_ended:
            super().handle_exit(sig, frame)
            return
        if self._drain is not None:
            log.info("signal %d while draining: aborting what is still in flight", sig)
            self._grace_ended = True
            self._loop.call_soon_threadsafe(self._engine.end_grace)
            return
        log.info("signal %d: draining for up to %.0f s", sig, self._grace_s)
        self._drain = asyncio.run_coroutine_threadsafe(self._drain_then_exit(), self._loop)  # type: ignore[assignment]

    async def _drain_then_exit(self) -> None:
        await self._engine.drain(self._grace_s)
        self.should_exit = True


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        model=args.model,
        dtype=args.dtype,
        block_size=args.block_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        num_kv_blocks=args.num_kv_blocks,
        kv_cache_bytes=args.kv_cache_bytes,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        enforce_eager=args.enforce_eager,
        enable_prefix_caching=args.enable_prefix_caching,
        attention_backend=args.attention_backend,
        seed=args.seed,
        device=args.device,
        quantization=args.quantization,
        enable_lora=args.enable_lora,
        max_loras=args.max_loras,
        max_lora_rank=args.max_lora_rank,
        lora_modules=tuple(lora_module(text) for text in args.lora_modules),
        weights_cache_dir=args.weights_cache_dir,
    )


def lora_module(text: str) -> tuple[str, str]:
    """``--lora-modules NAME=PATH`` as ``(name, path)``."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"--lora-modules takes NAME=PATH, got {text!r}")
    return name, path


def set_threads(requested: int | None, device: str = "cpu") -> StepThreads | None:
    """torch's intra-op thread count: ``--threads``, or on the CPU a ``StepThreads`` policy that picks it for each
    step (``choose_threads`` says why not on CUDA)."""
    cores = cpu_info().cores
    threads = choose_threads(requested, cores, device)
    if threads.warning:
        log.warning("%s", threads.warning)
    log.info("torch threads %s (%s)", threads.value, threads.reason)
    policy = StepThreads(cores) if threads_per_step(requested, cores, device) else None
    torch.set_num_threads(policy.fewer if policy is not None else int(threads.value))
    return policy


def run(args: argparse.Namespace) -> int:
    """Serves until SIGTERM; the model loads in the background once the port is open."""
    imported_at = time.time()
    configure_logging(args.log_level)
    try:
        config = engine_config(args)
        config.model = local_path(args.model, args.download_dir, report=log.info)  # on a cluster: fetched already
        config.lora_modules = tuple(
            (n, local_path(p, args.download_dir, report=log.info)) for n, p in config.lora_modules
        )
        file_modules = read_modules_file(args.lora_modules_file) if args.lora_modules_file else ()
        if file_modules and not config.enable_lora:
            raise ValueError("--lora-modules-file needs --enable-lora")
        source = resolve_model(args.model, args.download_dir)  # a wrong name fails now, not after the server is up
        plan = plan_hardware(config, source)  # so does --device cuda without a GPU, or an impossible --quantization
        step_threads = set_threads(args.threads, plan.device)
    except FetchError as exc:
        log.error("%s", exc)
        return 2 if isinstance(exc, SourceError) else 1
    except (ModelNotFoundError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    names = tuple(dict.fromkeys(args.served_model_name or [source.served_name, args.model]))
    metrics = ServerMetrics(names[0])
    metrics.startup.imports_done(imported_at)
    hub = KVEventHub(config.block_size, engine_id=uuid.uuid4().hex)
    engine = AsyncEngine(
        lambda: load_then_freeze(
            lambda: load_modules(EngineCore.from_config(config, step_threads), file_modules, args.download_dir, names)
        ),
        metrics,
        hub,
        max_waiting=args.max_waiting_requests,
        stream_capacity=args.stream_buffer,
        request_timeout_s=args.request_timeout,
    )
    settings = ServerSettings(
        served_model_names=names,
        max_body_bytes=args.max_body_bytes,
        ignore_unknown_fields=args.ignore_unknown_fields,
        tools=ToolParserSettings(args.tool_call_parser, args.enable_auto_tool_choice),
        allow_runtime_lora_updating=args.allow_runtime_lora_updating,
        download_dir=args.download_dir,
    )
    app = build_app(engine, settings)
    server_config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = DrainingServer(server_config, engine, args.shutdown_grace)
    engine.on_dead = server.stop_after_engine_death
    log.info("serving %s as %s on http://%s:%d", args.model, ", ".join(names), args.host, args.port)
    server.run()
    return server.exit_code
