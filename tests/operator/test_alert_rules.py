"""Shoal's alert rules are valid Prometheus rules (checked by the real `promtool`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from shoal.operator.builders.monitoring import prometheus_rule
from shoal.operator.generated import render_chart_alerts
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec


def promtool_check(tmp_path: Path, groups: list[dict]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package (`make system-deps`)"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_chart_alerts_pass_promtool(tmp_path: Path) -> None:
    rules = yaml.safe_load(render_chart_alerts())
    result = promtool_check(tmp_path, [{"name": "shoal.fleet", "rules": rules}])
    assert result.returncode == 0, result.stdout + result.stderr
    # shoal, vllm and sglang: backlog, TTFT and KV cache; llamacpp exports neither TTFT nor KV use: backlog only
    assert "SUCCESS: 10 rules found" in result.stdout


def test_per_deployment_rule_passes_promtool(tmp_path: Path) -> None:
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    groups = prometheus_rule(Owner("chat", "team-a", "uid"), spec)["spec"]["groups"]
    result = promtool_check(tmp_path, groups)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a malformed expression is refused."""
    result = promtool_check(tmp_path, [{"name": "g", "rules": [{"alert": "X", "expr": "sum by (("}]}])
    assert result.returncode != 0


def test_every_alert_names_its_inference_deployment(tmp_path: Path) -> None:
    """`promtool test rules` (Prometheus's own evaluator) on a backlog in two fleets: the fleet-wide rule reads
    `infd` from the engine pod's name, the per-fleet rule carries it fixed; both keep `namespace`."""
    fleet_wide = yaml.safe_load(render_chart_alerts())
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    own = prometheus_rule(Owner("chat", "team-a", "uid"), spec)["spec"]["groups"]
    for rule in fleet_wide + own[0]["rules"]:
        rule["for"] = "0s"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "fleet", "rules": fleet_wide}, *own]}))
    series = [
        {
            "series": 'shoal_engine_requests_waiting{namespace="team-a",pod="chat-engine-5d8f7c9b6-x2x9z"}',
            "values": "20x5",
        },
        {
            "series": 'shoal_engine_requests_waiting{namespace="team-b",pod="code-engine-7c9b6d8f5-q8w2k"}',
            "values": "12x5",
        },
    ]
    backlog = {"severity": "warning", "namespace": "team-a", "infd": "chat"}
    code = {**backlog, "namespace": "team-b", "infd": "code"}
    expected = [
        {"exp_labels": backlog, "exp_annotations": _annotations("team-a/chat", 20)},  # fleet-wide rule
        {"exp_labels": backlog, "exp_annotations": _annotations("team-a/chat", 20)},  # chat's own rule
        {"exp_labels": code, "exp_annotations": _annotations("team-b/code", 12)},
    ]
    _assert_backlog_alerts(tmp_path, series, expected)


def _assert_backlog_alerts(tmp_path: Path, series: list[dict[str, str]], expected: list[dict[str, Any]]) -> None:
    """promtool, over ``tmp_path/rules.yaml``: at 2m, ``ShoalEngineQueueBacklog`` fires exactly ``expected``."""
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "2m", "alertname": "ShoalEngineQueueBacklog", "exp_alerts": expected}
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    promtool = shutil.which("promtool")
    assert promtool
    result = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _annotations(where: str, waiting: int) -> dict[str, str]:
    return {
        "summary": "Shoal engines have a request backlog",
        "description": f"{where}: on average {waiting} requests wait per engine, over twice the target of 4.",
    }


def test_a_vllm_and_a_llama_server_backlog_fire_their_kinds_rules(tmp_path: Path) -> None:
    """The fleet-wide rules read each kind's own queue gauge (``docs/engines.md``), labelled with the kind; a
    Shoal engine's rule does not fire on another kind's series."""
    fleet_wide = yaml.safe_load(render_chart_alerts())
    for rule in fleet_wide:
        rule["for"] = "0s"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "fleet", "rules": fleet_wide}]}))
    series = [
        {
            "series": 'vllm:num_requests_waiting{namespace="a",pod="v-engine-5d8f7c9b6-x2x9z",model_name="m",engine="0"}',
            "values": "20x5",
        },
        {"series": 'llamacpp:requests_deferred{namespace="b",pod="l-engine-7c9b6d8f5-q8w2k"}', "values": "9x5"},
    ]
    vllm = {"severity": "warning", "namespace": "a", "infd": "v", "engine_kind": "vllm"}
    llama = {"severity": "warning", "namespace": "b", "infd": "l", "engine_kind": "llamacpp"}
    expected = [
        {"exp_labels": vllm, "exp_annotations": _annotations("a/v", 20)},
        {"exp_labels": llama, "exp_annotations": _annotations("b/l", 9)},
    ]
    _assert_backlog_alerts(tmp_path, series, expected)
