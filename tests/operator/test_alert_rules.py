"""Shoal's alert rules are valid Prometheus rules (checked by the real `promtool`), fire as their runbooks say
(`promtool test rules`, Prometheus's own evaluator), and each has a runbook in `docs/runbooks/`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from shoal.operator.alerts import RUNBOOKS
from shoal.operator.builders.monitoring import prometheus_rule
from shoal.operator.generated import render_chart_alerts
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

RUNBOOK_DIR = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


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
    # shoal, vllm and sglang: backlog, TTFT and KV cache; llamacpp exports neither TTFT nor KV use: backlog only;
    # the gateways' 5xx share and no healthy backend; the operator's failing reconciles
    assert "SUCCESS: 13 rules found" in result.stdout


def test_per_deployment_rule_passes_promtool(tmp_path: Path) -> None:
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    groups = prometheus_rule(Owner("chat", "team-a", "uid"), spec)["spec"]["groups"]
    result = promtool_check(tmp_path, groups)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_its_runbook() -> None:
    """`runbook_url` on every alert, chart-wide and per fleet, pointing at a page that exists in docs/runbooks/
    with the three sections a runbook has."""
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    own = prometheus_rule(Owner("chat", "team-a", "uid"), spec)["spec"]["groups"][0]["rules"]
    rules = yaml.safe_load(render_chart_alerts()) + own
    assert {r["alert"] for r in own} >= {"ShoalGatewayHigh5xxRate", "ShoalGatewayNoHealthyBackend"}
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOKS}/{rule['alert']}.md", rule["alert"]
        page = RUNBOOK_DIR / f"{rule['alert']}.md"
        assert page.is_file(), f"{rule['alert']} has no runbook at {page}"
        text = page.read_text()
        for section in ("## What it means", "## How to check", "## What to do"):
            assert section in text, f"{page.name} lacks {section!r}"
    assert {p.stem for p in RUNBOOK_DIR.glob("Shoal*.md")} == {r["alert"] for r in rules}, "a runbook of no alert"


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a malformed expression is refused."""
    result = promtool_check(tmp_path, [{"name": "g", "rules": [{"alert": "X", "expr": "sum by (("}]}])
    assert result.returncode != 0


def test_every_alert_names_its_inference_deployment(tmp_path: Path) -> None:
    """`promtool test rules` (Prometheus's own evaluator) on a backlog in two fleets: the fleet-wide rule reads
    `infd` from the engine pod's name, the per-fleet rule carries it fixed; both keep `namespace`."""
    _fleet_wide_and_chats_own(tmp_path)
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
    _assert_alerts(tmp_path, series, "ShoalEngineQueueBacklog", expected)


def _assert_alerts(
    tmp_path: Path, series: list[dict[str, str]], alert: str, expected: list[dict[str, Any]], at: str = "2m"
) -> None:
    """promtool, over ``tmp_path/rules.yaml``: at ``at``, ``alert`` fires exactly ``expected``."""
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
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
        "runbook_url": f"{RUNBOOKS}/ShoalEngineQueueBacklog.md",
    }


def _fleet_wide_and_chats_own(tmp_path: Path) -> None:
    """Writes ``rules.yaml``: the chart's rules and team-a/chat's own, every ``for:`` at 0 s."""
    fleet_wide = yaml.safe_load(render_chart_alerts())
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    own = prometheus_rule(Owner("chat", "team-a", "uid"), spec)["spec"]["groups"]
    for rule in fleet_wide + own[0]["rules"]:
        rule["for"] = "0s"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "fleet", "rules": fleet_wide}, *own]}))


CHAT_GATEWAY = 'namespace="team-a",pod="chat-gateway-5d8f7c9b6-x2x9z"'


def test_a_gateway_answering_5xx_fires_for_its_fleet_and_a_healthy_one_does_not(tmp_path: Path) -> None:
    """10% of chat's answers are 503s (over the 5% threshold): both the fleet-wide and chat's own rule fire,
    naming team-a/chat; code's gateway answers 200 only and raises nothing."""
    _fleet_wide_and_chats_own(tmp_path)
    series = [
        {
            "series": f'shoal_gateway_requests_total{{{CHAT_GATEWAY},model="m",tenant="t",status="200"}}',
            "values": "0+540x10",
        },
        {
            "series": f'shoal_gateway_requests_total{{{CHAT_GATEWAY},model="m",tenant="t",status="503"}}',
            "values": "0+60x10",
        },
        {
            "series": 'shoal_gateway_requests_total{namespace="team-b",pod="code-gateway-7c9b6d8f5-q8w2k",'
            'model="m",tenant="t",status="200"}',
            "values": "0+600x10",
        },
    ]
    labels = {"severity": "warning", "namespace": "team-a", "infd": "chat"}
    annotations = {
        "summary": "A Shoal gateway answers many requests with a 5xx",
        "description": "team-a/chat: 10% of the gateway's answers over 5 minutes are 5xx (threshold 5%).",
        "runbook_url": f"{RUNBOOKS}/ShoalGatewayHigh5xxRate.md",
    }
    expected = [{"exp_labels": labels, "exp_annotations": annotations}] * 2
    _assert_alerts(tmp_path, series, "ShoalGatewayHigh5xxRate", expected, at="6m")


def test_no_healthy_backend_fires_only_when_backends_are_known_and_all_down(tmp_path: Path) -> None:
    """chat's gateway knows two engines, both failing their health checks: the alert fires; code's gateway has
    one of two up, and a gateway with no backend at all (a fleet at zero) has no series: neither fires."""
    _fleet_wide_and_chats_own(tmp_path)
    series = [
        {"series": f'shoal_gateway_backend_up{{{CHAT_GATEWAY},backend="http://10.0.0.1:8000"}}', "values": "0x5"},
        {"series": f'shoal_gateway_backend_up{{{CHAT_GATEWAY},backend="http://10.0.0.2:8000"}}', "values": "0x5"},
        {
            "series": 'shoal_gateway_backend_up{namespace="team-b",pod="code-gateway-7c9b6d8f5-q8w2k",'
            'backend="http://10.0.1.1:8000"}',
            "values": "0x5",
        },
        {
            "series": 'shoal_gateway_backend_up{namespace="team-b",pod="code-gateway-7c9b6d8f5-q8w2k",'
            'backend="http://10.0.1.2:8000"}',
            "values": "1x5",
        },
    ]
    labels = {"severity": "warning", "namespace": "team-a", "infd": "chat"}
    annotations = {
        "summary": "A Shoal gateway has no healthy engine to route to",
        "description": "team-a/chat: the gateway knows engines but none passes its health check; requests are "
        "held or refused.",
        "runbook_url": f"{RUNBOOKS}/ShoalGatewayNoHealthyBackend.md",
    }
    expected = [{"exp_labels": labels, "exp_annotations": annotations}] * 2
    _assert_alerts(tmp_path, series, "ShoalGatewayNoHealthyBackend", expected)


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
