"""``bench/serve.py``'s peer table: every server's rows with ratios to vLLM's and llama-server's of the same round.

No server runs here (vLLM need not be installed): the rows are shoal bench serve summaries made up for the test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import hf_checkpoint
import serve
from serve import LLAMA, VLLM, ServerRun


def summary(tok_s: float, failed: int = 0) -> dict:
    return {
        "failed": failed,
        "output_throughput_tok_s": tok_s,
        "ttft": {"mean_ms": 1.0, "p50_ms": 100.0, "p95_ms": 150.0, "p99_ms": 200.0},
        "itl": {"mean_ms": 1.0, "p50_ms": 10.0, "p95_ms": 15.0, "p99_ms": 20.0},
        "errors": [],
    }


def rows_of(*tok_s: float) -> list[tuple[int, int, dict]]:
    """One row per level: concurrency 1 (4 requests), then 64 (64 requests)."""
    return [(c, n, summary(t)) for (c, n), t in zip([(1, 4), (64, 64)], tok_s, strict=True)]


def test_ratios_are_to_vllm_and_llama_server_of_the_same_round_and_level() -> None:
    runs = [
        ServerRun("shoal serve (GGUF)", 1, rows_of(30.0, 600.0)),
        ServerRun(VLLM, 1, rows_of(20.0, 400.0)),
        ServerRun(LLAMA, 1, rows_of(60.0, 300.0)),
        ServerRun("shoal serve (GGUF)", 2, rows_of(40.0, 800.0)),
        ServerRun(VLLM, 2, rows_of(10.0, 200.0)),
        ServerRun(LLAMA, 2, rows_of(80.0, 400.0)),
    ]
    rows = serve.summary_rows(runs)
    by = {(r["server"], r["round"], r["concurrency"]): r for r in rows}
    assert by["shoal serve (GGUF)", 1, 1]["vs_vllm"] == pytest.approx(1.5)
    assert by["shoal serve (GGUF)", 1, 64]["vs_llama_server"] == pytest.approx(2.0)
    assert by["shoal serve (GGUF)", 2, 1]["vs_vllm"] == pytest.approx(4.0)
    assert by["shoal serve (GGUF)", 2, 64]["vs_llama_server"] == pytest.approx(2.0)
    assert by[VLLM, 2, 64]["vs_vllm"] == pytest.approx(1.0)
    assert by[VLLM, 2, 64]["vs_llama_server"] == pytest.approx(0.5)
    assert by[LLAMA, 1, 1]["vs_vllm"] == pytest.approx(3.0)
    assert len(rows) == 12
    json.dumps(rows)  # what summary.json holds

    table = serve.format_table(rows, rounds=2).splitlines()
    assert "vs vLLM" in table[0] and "vs llama-server" in table[0]
    assert len(table) == 2 + 12
    assert table[2].startswith("| shoal serve (GGUF) r1 | 1 | 4 (0) | 30.0 | 1.50x | 0.50x | 100 / 200 | 10 / 20 |")


def test_a_peer_that_did_not_run_shows_no_ratio() -> None:
    runs = [ServerRun("shoal serve (GGUF)", 1, rows_of(30.0, 600.0)), ServerRun(LLAMA, 1, rows_of(60.0, 300.0))]
    rows = serve.summary_rows(runs)
    assert [r["vs_vllm"] for r in rows] == [None] * 4
    line = serve.format_table(rows, rounds=1).splitlines()[2]
    assert line.startswith("| shoal serve (GGUF) | 1 | 4 (0) | 30.0 | - | 0.50x |")


def test_arguments(tmp_path: Path) -> None:
    args = serve.parse_args(["--levels", "2:4", "64:64", "--serve-arg=--threads=1", "--no-vllm"])
    assert args.levels == [(2, 4), (64, 64)]
    assert args.serve_args == ["--threads", "1"]
    assert serve.vllm_python(args.vllm, args.no_vllm) is None

    assert serve.parse_args(["--vllm"]).vllm == serve.INSTALL
    python = tmp_path / "venv" / "bin" / "python"
    assert serve.parse_args(["--vllm", str(python)]).vllm == str(python)
    with pytest.raises(SystemExit):
        serve.vllm_python(str(python), False)  # no such file
    with pytest.raises(SystemExit):
        serve.parse_args(["--vllm", "--no-vllm"])
    args = serve.parse_args(["--hf-dir", str(tmp_path), "--no-shoal-hf"])  # vLLM alone on that directory
    assert args.hf_dir == tmp_path and args.no_shoal_hf


def test_vllm_serves_the_directory_under_the_bench_model_name(tmp_path: Path) -> None:
    args = serve.parse_args(["--model", "smollm2-135m"])
    python = tmp_path / "bin" / "python"
    argv = serve.vllm_argv(args, python, tmp_path / "hf")
    assert argv[:5] == [str(python), "-m", "vllm.entrypoints.cli.main", "serve", str(tmp_path / "hf")]
    assert argv[argv.index("--served-model-name") + 1] == "smollm2-135m"
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "vllm").touch()
    assert serve.vllm_argv(args, python, tmp_path / "hf")[:2] == [str(tmp_path / "bin" / "vllm"), "serve"]
    assert serve.vllm_version("(APIServer pid=1) INFO [api_utils.py:347]  ▄▄ ▄█ █  version 0.32.0\n") == "0.32.0"


def test_the_checkpoint_is_cached_under_shoal_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    out = hf_checkpoint.default_dir("smollm2-135m")
    assert out == tmp_path / "checkpoints" / "smollm2-135m-bf16"
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    assert not hf_checkpoint.is_complete(out)
    (out / hf_checkpoint.MARKER).touch()
    assert hf_checkpoint.ensure("smollm2-135m") == out  # complete: nothing converted
