"""Bad traces, profiles and names fail with an error naming the line or field; nothing is silently dropped."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sim_fixtures import small_profile

from shoal.autoscale import AutoscalingConfig
from shoal.cli import main
from shoal.simulate.policies import Sizing, make_scaling_policy
from shoal.simulate.profile import ProfileError, load_profile
from shoal.simulate.trace import TraceError, load_trace


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "unsorted.csv",
            "timestamp,prompt_tokens,output_tokens\n0,10,5\n2,10,5\n1,10,5\n",
            "line 4: timestamp 1 is earlier than the previous one",
        ),
        (
            "negative.csv",
            "timestamp,prompt_tokens,output_tokens\n0,10,5\n-3,10,5\n",
            "line 3: timestamp -3 is negative",
        ),
        ("columns.csv", "timestamp,prompt_tokens\n0,10\n", "line 1: missing column(s) output_tokens"),
        ("zero.csv", "timestamp,prompt_tokens,output_tokens\n0,10,5\n1,10,0\n", "line 3: output_tokens must be > 0"),
        (
            "text.csv",
            "timestamp,prompt_tokens,output_tokens\n0,ten,5\n",
            "line 2: field prompt_tokens is not an integer",
        ),
        ("short.csv", "timestamp,prompt_tokens,output_tokens\n0,10\n", "line 2: 2 fields, expected 3"),
        (
            "prefix.csv",
            "timestamp,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,5,1,20\n",
            "line 2: prefix_tokens 20 exceeds prompt_tokens 10",
        ),
        (
            "missing.jsonl",
            '{"timestamp": 0, "prompt_tokens": 3, "output_tokens": 1}\n{"timestamp": 1, "prompt_tokens": 3}\n',
            "line 2: missing field(s) output_tokens",
        ),
        (
            "broken.jsonl",
            '{"timestamp": 0, "prompt_tokens": 3, "output_tokens": 1}\n{"timestamp": 1,\n',
            "line 2: not JSON",
        ),
        (
            "azure.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,1,1\n",
            "line 3: field TIMESTAMP is not a date and time",
        ),
        (
            "azure_unsorted.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:40.00,10,4\n",
            "line 3: timestamp",
        ),
        ("empty.csv", "", "empty file"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(TraceError, match=re.escape(message)):
        load_trace(_write(tmp_path, name, text))


def test_every_row_of_a_good_trace_is_kept(tmp_path: Path) -> None:
    azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{s:02d}.5000000,{100 + s},{1 + s}\n" for s in range(40)
    )
    trace = load_trace(_write(tmp_path, "azure.csv", azure))
    assert len(trace) == 40 and trace.arrival[0] == 0.0 and trace.arrival[-1] == pytest.approx(39.0)
    assert trace.prompt_tokens.tolist() == [100 + s for s in range(40)]
    jsonl = "".join(
        json.dumps(
            {"timestamp": i / 2, "prompt_tokens": 9, "output_tokens": 3, "prefix_group": i % 2, "prefix_tokens": 4}
        )
        + "\n"
        for i in range(7)
    )
    trace = load_trace(_write(tmp_path, "t.jsonl", jsonl))
    assert len(trace) == 7 and trace.prefix_group.tolist() == [0, 1, 0, 1, 0, 1, 0]


def test_a_bad_profile_names_the_field(tmp_path: Path) -> None:
    good = json.loads(load_profile("gpu-8b-h100-derived").to_json())
    del good["step"]["per_decode_seq_s"]
    with pytest.raises(ProfileError, match=r"missing field 'step.per_decode_seq_s'"):
        load_profile(str(_write(tmp_path, "p.json", json.dumps(good))))
    with pytest.raises(ProfileError, match="neither a shipped profile"):
        load_profile(str(tmp_path / "nope.json"))


def test_a_profile_that_does_not_cover_the_batch_asked_for_is_refused() -> None:
    profile = small_profile()
    with pytest.raises(ProfileError, match=r"max_num_seqs 64 is beyond the decode batches.*covered_decode_seqs 16"):
        profile.with_engine(max_num_seqs=64)
    with pytest.raises(ProfileError, match=r"max_num_batched_tokens 4096 is beyond.*covered_batch_tokens 1024"):
        profile.with_engine(max_num_batched_tokens=4096)


def test_an_unknown_policy_name_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match="unknown policy 'vpa'; choose from shoal, shoal-predictive, hpa, keda, kpa, llmd-slo, llmd-queue, dynamo, aibrix, fixed",
    ):
        make_scaling_policy("vpa", AutoscalingConfig(), Sizing(4.0, 2, 1.0))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trace", "steady", "--policies", "shoal,vpa"], "unknown policy 'vpa'"),
        (["--trace", "nowhere.csv"], "trace 'nowhere.csv' is neither a preset"),
        (
            ["--trace", "steady", "--profile", "gpu-8b-h100-derived", "--max-num-seqs", "4096"],
            "max_num_seqs 4096 is beyond",
        ),
        (["--trace", "steady", "--routing", "random"], "unknown routing policy 'random'"),
        (["--trace", "steady", "--burst-memory-seconds", "-1"], "--burst-memory-seconds must be >= 0, got -1"),
        (["--trace", "steady", "--profile", "gpu-8b-h100"], "profile 'gpu-8b-h100' is now 'gpu-8b-h100-derived'"),
    ],
)
def test_the_command_line_reports_bad_input_and_exits_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--no-progress", *argv]) == 2
    assert message in capsys.readouterr().err
