"""A starting server is not ready until its warm-up ran, and warm-up leaves no trace in what it reports."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from serve_harness import ServeProcess, wait_for

from shoal.local import metric


@pytest.mark.timeout(300)
def test_ready_only_after_warm_up_and_its_requests_are_not_counted(tmp_path: Path, tiny_model_dir: Path) -> None:
    server = ServeProcess(tiny_model_dir, tmp_path / "serve.log", "--device", "cpu", "--num-kv-blocks", "64")
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{server.url}/ready", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        assert wait_for(ready, timeout_s=240, interval_s=0.02), server.log()
        log = server.log_path.read_text(errors="replace")  # read at once: the line is there by the first 200
        warmed = log.index("start-up took ")
        assert "warming" in log[warmed:].splitlines()[0] and log.index("model loaded") > warmed
        assert "warm-up: a prefill of 255 tokens, decode steps at batch sizes 1, 2, 4, 8, 64" in log
        for name in (
            "shoal_engine_generation_tokens_total",
            "shoal_engine_prompt_tokens_total",
            "shoal_engine_requests_finished_total",
            "shoal_engine_prefix_cache_queries_tokens_total",
            "shoal_engine_kv_cache_usage_ratio",
        ):
            assert metric(server.url, name) == 0, name
        assert metric(server.url, "shoal_engine_kv_cache_free_blocks") == 64
    finally:
        server.stop()
