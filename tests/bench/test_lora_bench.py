"""``bench/lora.py``: Shoal and vLLM given the same checkpoint, adapters and LoRA flags; each engine's figures
(the median round) with adapters/base, Shoal/vLLM per mode; an engine that could not serve shows its error and no
figure. The script runs end to end on the tiny model with Shoal alone (vLLM takes minutes to start: its path is
checked by its command line and by made-up rounds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import lora as lora_bench  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def rounds_of(*tok_s: tuple[float, float], cpu_share: float = 0.5) -> list[dict[str, dict[str, Any]]]:
    """Made-up rounds: (base, adapters) output tokens/s each, the engine busy ``cpu_share`` of the wall time's
    two CPUs (so tokens per CPU second are ``tok_s / (2 * cpu_share)``), no request failed."""
    return [
        {
            mode: {"tokens_per_s": value, "tokens_per_cpu_s": value / (2 * cpu_share), "failed": 0}
            for mode, value in zip(lora_bench.MODES, pair, strict=True)
        }
        for pair in tok_s
    ]


def test_both_engines_serve_the_same_checkpoint_with_the_same_lora_flags(tmp_path: Path) -> None:
    adapters = {"adapter-0": tmp_path / "a0", "adapter-1": tmp_path / "a1"}
    flags = lora_bench.lora_flags(adapters, rank=8, max_num_seqs=64)
    shoal = lora_bench.shoal_argv(tmp_path / "base", flags, threads=2)
    vllm = lora_bench.vllm_argv(
        tmp_path / "bin" / "python", tmp_path / "base", flags, ["--max-num-batched-tokens", "4096"]
    )

    for argv in (shoal, vllm):
        assert argv[argv.index("--served-model-name") + 1] == lora_bench.SERVED
        assert "--enable-lora" in argv
        assert argv[argv.index("--max-loras") + 1] == "2"
        assert argv[argv.index("--max-lora-rank") + 1] == "8"
        assert argv[argv.index("--max-num-seqs") + 1] == "64"
        modules = argv.index("--lora-modules")
        assert argv[modules + 1 : modules + 3] == [f"adapter-0={tmp_path / 'a0'}", f"adapter-1={tmp_path / 'a1'}"]
    assert shoal[shoal.index("--model") + 1] == str(tmp_path / "base")
    assert shoal[-2:] == ["--threads", "2"]
    assert vllm[:4] == [str(tmp_path / "bin" / "python"), "-m", "vllm.entrypoints.cli.main", "serve"]
    assert vllm[4] == str(tmp_path / "base")
    assert vllm[vllm.index("--dtype") + 1] == "bfloat16"
    assert vllm[-2:] == ["--max-num-batched-tokens", "4096"]


def test_figures_are_median_rounds_with_ratios_per_engine_and_per_mode() -> None:
    shoal = lora_bench.EngineRun("Shoal", rounds=rounds_of((900, 500), (1000, 600), (800, 550)), load_average=(2, 3))
    vllm = lora_bench.EngineRun(lora_bench.VLLM, rounds=rounds_of((600, 400), (500, 200), (700, 300), cpu_share=1))
    vllm.load_average = (1.5, 2.5)

    assert shoal.median("base") == 900 and shoal.median("lora") == 550
    assert shoal.median("lora", "tokens_per_cpu_s") == 550
    engines = [shoal.as_dict(), vllm.as_dict()]
    assert engines[0]["lora_over_base"]["tokens_per_s"] == pytest.approx(550 / 900)
    assert engines[1]["lora_over_base"]["tokens_per_cpu_s"] == pytest.approx(300 / 600)
    ratios = lora_bench.peer_ratios([shoal, vllm])
    assert ratios["tokens_per_s"] == {"base": pytest.approx(1.5), "lora": pytest.approx(550 / 300)}
    assert ratios["tokens_per_cpu_s"] == {"base": pytest.approx(900 / 300), "lora": pytest.approx(550 / 150)}
    json.dumps(engines)  # what --json writes

    table = lora_bench.format_table(engines, ratios).splitlines()
    assert len({line.count("|") for line in table}) == 1, "every row has the header's cells"
    assert table[2] == (
        "| Shoal | 900.0 (800.0-1000.0) | 550.0 (500.0-600.0) | 0.61x "
        "| 900.0 (800.0-1000.0) | 550.0 (500.0-600.0) | 0.61x | 0 | 2.0 -> 3.0 |"
    )
    assert table[3].startswith("| vLLM | 600.0 (500.0-700.0) | 300.0 (200.0-400.0) | 0.50x | 300.0 (250.0-350.0) |")
    assert table[4] == "| Shoal / vLLM | 1.50x | 1.83x |  | 3.00x | 3.67x |  | | |"


def test_a_round_with_a_failed_request_gives_no_figure() -> None:
    rounds = rounds_of((900, 500), (1000, 600))
    rounds[1]["lora"]["failed"] = 1
    run = lora_bench.EngineRun("Shoal", rounds=rounds, load_average=(1, 1))
    assert run.median("base") == 950 and run.median("lora") is None
    assert run.as_dict()["lora_over_base"] == {"tokens_per_s": None, "tokens_per_cpu_s": None}
    assert lora_bench.peer_ratios([run])["tokens_per_s"] == {"base": None, "lora": None}
    row = lora_bench.format_table([run.as_dict()], lora_bench.peer_ratios([run])).splitlines()[2]
    assert row.startswith("| Shoal | 950.0 (900.0-1000.0) | - (failed requests) (500.0-600.0) | - |")
    assert row.endswith("| 1 | 1.0 -> 1.0 |")


def test_an_engine_that_could_not_serve_shows_its_error_and_no_figure() -> None:
    log = "\n".join(
        [
            "WARNING [system_utils.py:255] Found ulimit of 20000: can cause `OSError: [Errno 24] Too many open files`",
            "Traceback (most recent call last):",
            '  File "worker.py", line 1, in <module>',
            "NotImplementedError: LoRA is not supported on this platform",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ]
    )
    error = f"RuntimeError: {lora_bench.named_errors(log)}"
    assert error.endswith(
        "NotImplementedError: LoRA is not supported on this platform | "
        "RuntimeError: Engine core initialization failed. See root cause above."
    )
    assert lora_bench.named_errors("started\nkilled") == "killed"
    shoal = lora_bench.EngineRun("Shoal", rounds=rounds_of((900, 500)), load_average=(1, 1))
    vllm = lora_bench.EngineRun(lora_bench.VLLM, error=error)
    ratios = lora_bench.peer_ratios([shoal, vllm])
    assert ratios == {figure: {"base": None, "lora": None} for figure in lora_bench.FIGURES}
    table = lora_bench.format_table([shoal.as_dict(), vllm.as_dict()], ratios).splitlines()
    assert table[3] == f"| vLLM | - | - | - | - | - | - | - | {error} |"
    assert table[4] == "| Shoal / vLLM | - | - |  | - | - |  | | |"


def test_the_script_runs_end_to_end_with_shoal_alone(bench_model: Path, tmp_path: Path) -> None:
    """Adapters written by peft, loaded by a real ``shoal serve`` and served in every round without a failure."""
    out = tmp_path / "lora.json"
    argv = [
        sys.executable, str(BENCH / "lora.py"), "--model", str(bench_model), "--no-vllm", "--adapters", "2",
        "--rank", "4", "--requests", "4", "--input-len", "4", "--output-len", "3", "--rounds", "2", "--json", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH.parent), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]

    result: dict[str, Any] = json.loads(out.read_text())
    shoal, vllm = result["engines"]
    assert shoal["engine"] == "Shoal" and shoal["error"] is None
    assert len(shoal["rounds"]) == 2
    for round_ in shoal["rounds"]:
        for mode in ("base", "lora"):
            assert round_[mode]["failed"] == 0 and round_[mode]["output_tokens"] == 4 * 3
            assert round_[mode]["tokens_per_cpu_s"] > 0
    assert shoal["lora_over_base"]["tokens_per_s"] > 0
    assert vllm == {**vllm, "engine": "vLLM", "error": "not run: --no-vllm", "rounds": []}
    assert result["shoal_over_vllm"]["tokens_per_s"] == {"base": None, "lora": None}
    assert result["checkpoint"] == str(bench_model)
    assert "| Shoal / vLLM | - | - |" in done.stdout
