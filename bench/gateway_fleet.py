"""Processes for the gateway benchmarks: real ``shoal serve`` engines and ``shoal gateway``, on loopback ports."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shoal.local import LocalProcess, shoal_command


def start_engines(model: str, count: int, served_name: str, log_dir: Path, *extra: str) -> list[LocalProcess]:
    """``count`` engines, one CPU thread each so that several share the machine fairly; waits until all ready."""
    argv = shoal_command(
        "serve", "--model", model, "--served-model-name", served_name, "--log-level", "warning", *extra
    )
    engines = [LocalProcess(argv, log_dir / f"engine-{i}.log", {"OMP_NUM_THREADS": "1"}) for i in range(count)]
    for engine in engines:
        engine.wait_ready()
    return engines


def start_gateway(backends: Sequence[str], log_dir: Path, *extra: str) -> LocalProcess:
    backend_args = (a for url in backends for a in ("--backend", url))
    argv = shoal_command("gateway", "--log-level", "warning", *backend_args, *extra)
    gateway = LocalProcess(argv, log_dir / "gateway.log")
    gateway.wait_ready()
    return gateway
