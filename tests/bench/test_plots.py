"""``--plots``: the latency CDF always, the fleet over time only when a timeline was read."""

from __future__ import annotations

from pathlib import Path

from shoal.loadgen.client import RequestResult
from shoal.loadgen.plots import fetch_timeline, write_plots

PNG = b"\x89PNG\r\n\x1a\n"


def test_without_a_fleet_timeline_only_the_latency_cdf_is_written(tmp_path: Path) -> None:
    results = [RequestResult(True, ttft=0.1 * i, e2e=0.5 * i, output_tokens=8) for i in range(1, 20)]
    results.append(RequestResult(False, error="HTTP 503"))
    written = write_plots(tmp_path / "plots", results, None, start=0.0)
    assert [p.name for p in written] == ["latency_cdf.png"]
    assert written[0].read_bytes().startswith(PNG)


def test_a_timeline_with_gaps_is_plotted(tmp_path: Path) -> None:
    timeline = [
        {
            "t": 100.0 + i,
            "ready": 1 + (i > 5),
            "starting": int(i == 5),
            "draining": 0,
            "desired": 2,
            "waiting": 10.0 - i,
            "running": 2.0,
            "ttft_p95": None if i < 3 else 0.5,
        }
        for i in range(10)
    ]
    written = write_plots(tmp_path, [RequestResult(True, ttft=0.2, e2e=1.0)], timeline, start=100.0)
    assert [p.name for p in written] == ["latency_cdf.png", "fleet_over_time.png"]
    assert all(p.read_bytes().startswith(PNG) for p in written)


def test_a_server_without_a_timeline_gives_none() -> None:
    assert fetch_timeline("http://127.0.0.1:9", 0.0, 1.0) is None  # nothing listens on the discard port
