"""`helm test`: the chart's test Job's script sends one completion through a real gateway with auth on, and on the
test bed `helm test` runs the Job in the fleet's namespace with the fleet's API-key Secret mounted.

The test bed's pods are kwok's (no container runs), so the script itself is run here against a real ``shoal serve``
and a real ``shoal gateway``; the test bed shows the rest: the Job the chart renders is admitted, mounts the Secret
the operator generates, and ``helm test`` waits for it and reports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from operator_harness import CHART
from support.kube_testbed import ControlPlane

from shoal.local import LocalProcess, shoal_command

SCRIPT = CHART / "files" / "request_through_gateway.py"
SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
KEY = "sk-helm-test"


@pytest.fixture(scope="module")
def gateway_with_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real ``shoal gateway`` with one tenant over a real ``shoal serve`` (the tiny model); its URL, and the
    tenants file as the operator's generated Secret holds it."""
    sys.path.insert(0, str(SERVER_TESTS))
    from serve_harness import ServeProcess, build_tiny_model

    workdir = tmp_path_factory.mktemp("helm-test")
    model = build_tiny_model(workdir / "model")
    engine = ServeProcess(model, workdir / "engine.log")
    keys = workdir / "api-keys"
    keys.write_text(yaml.safe_dump({"tenants": {"default": {"api_keys": [KEY]}}}))
    argv = shoal_command(
        "gateway", "--backend", engine.url, "--api-keys", str(keys), "--tokenizer", f"{engine.model_name}={model}",
        "--health-interval", "0.2", "--log-level", "warning",
    )  # fmt: skip
    gateway = LocalProcess(argv, workdir / "gateway.log")
    try:
        engine.wait_ready()
        gateway.wait_ready(timeout=60)
        yield gateway.url, keys
    finally:
        gateway.stop()
        engine.stop()


def run_script(url: str, keys: Path) -> subprocess.CompletedProcess[str]:
    """The script as the Job runs it: ``python -c`` with the file's text, configured by the environment."""
    env = {**os.environ, "SHOAL_GATEWAY_URL": url, "SHOAL_API_KEYS_FILE": str(keys), "SHOAL_TEST_TIMEOUT_SECONDS": "60"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.read_text()], env=env, capture_output=True, text=True, timeout=90
    )


def test_the_script_sends_one_completion_through_the_gateway(gateway_with_auth: tuple[str, Path]) -> None:
    url, keys = gateway_with_auth
    done = run_script(url, keys)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"tiny-llama answered through {url}: ")


def test_the_script_fails_naming_what_the_gateway_said(gateway_with_auth: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = gateway_with_auth
    wrong = tmp_path / "api-keys"
    wrong.write_text(yaml.safe_dump({"tenants": {"default": {"api_keys": ["sk-not-a-tenant"]}}}))
    done = run_script(url, wrong)
    assert done.returncode == 1 and f"{url}/v1/models: HTTP 401" in done.stderr, done.stderr


@pytest.mark.kube
def test_helm_test_runs_the_job_in_the_fleets_namespace(kube_cluster: ControlPlane) -> None:
    plane, release, fleet = kube_cluster, "shoal-helm-test", "chat"
    plane.kubectl("create", "namespace", "helm-test-fleet")
    generated = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{fleet}-api-keys"}}
    secret = {**generated, "stringData": {"api-keys": yaml.safe_dump({"tenants": {"default": {"api_keys": [KEY]}}})}}
    plane.kubectl("apply", "-n", "helm-test-fleet", "-f", "-", input=yaml.safe_dump(secret))
    values = f"peering.name={release},replicaCount=1,test.inferenceDeployment={fleet},test.namespace=helm-test-fleet"
    plane.helm("install", release, str(CHART), "--namespace", release, "--create-namespace", "--set", values)
    try:
        done = plane.helm("test", release, "--namespace", release, "--timeout", "90s")
        assert f"TEST SUITE:     {release}-test-{fleet}" in done.stdout and "Phase:          Succeeded" in done.stdout
        job = yaml.safe_load(
            plane.kubectl("get", "job", f"{release}-test-{fleet}", "-n", "helm-test-fleet", "-o", "yaml").stdout
        )
        pod = job["spec"]["template"]["spec"]
        assert pod["volumes"] == [
            {"name": "api-keys", "secret": {"secretName": f"{fleet}-api-keys", "defaultMode": 420}}
        ]
        env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
        assert env["SHOAL_GATEWAY_URL"] == f"http://{fleet}.helm-test-fleet.svc"
        assert pod["containers"][0]["command"] == ["python", "-c", SCRIPT.read_text()]
    finally:
        plane.helm("uninstall", release, "--namespace", release, "--wait")
