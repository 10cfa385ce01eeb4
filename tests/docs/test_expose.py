"""docs/expose.md's Ingress and HTTPRoute: their limits cover the gateway's own, they reach the Service the
operator writes, and the test bed's apiserver accepts them (the HTTPRoute against Gateway API's own CRDs, from
its Go module)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kube_testbed import ControlPlane
from support.polling import eventually

from shoal.operator.builders.gateway import gateway_service
from shoal.operator.naming import Owner
from shoal.protocol.gateway_timeouts import (
    DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    DEFAULT_INTER_TOKEN_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "expose.md"
GATEWAY_API = "sigs.k8s.io/gateway-api@v1.6.3"
NGINX = "nginx.ingress.kubernetes.io/"


def manifests() -> dict[str, dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    return {doc["kind"]: doc for doc in map(yaml.safe_load, blocks)}


def service_port() -> dict[str, Any]:
    (port,) = gateway_service(Owner("smollm2", "default", "uid"))["spec"]["ports"]
    return dict(port)


def max_body_bytes() -> int:
    """``shoal gateway --max-body-bytes``'s default, from its own parser."""
    from shoal.cli import build_parser

    return int(build_parser().parse_args(["gateway"]).max_body_bytes)


def test_the_ingress_streams_and_outwaits_the_gateway() -> None:
    ingress = manifests()["Ingress"]
    notes = ingress["metadata"]["annotations"]
    assert notes[f"{NGINX}proxy-buffering"] == "off"
    for name in ("proxy-read-timeout", "proxy-send-timeout"):
        assert float(notes[NGINX + name]) > DEFAULT_REQUEST_TIMEOUT_S  # a non-streamed answer waits this long
    size = re.fullmatch(r"(\d+)m", notes[f"{NGINX}proxy-body-size"])
    assert size and int(size.group(1)) * 1024 * 1024 >= max_body_bytes()
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert (backend["name"], backend["port"]["name"]) == ("smollm2", service_port()["name"])


def test_the_httproute_outwaits_the_gateway() -> None:
    rule = manifests()["HTTPRoute"]["spec"]["rules"][0]
    seconds = re.fullmatch(r"(\d+)s", rule["timeouts"]["request"])
    assert seconds and float(seconds.group(1)) > DEFAULT_REQUEST_TIMEOUT_S
    assert rule["backendRefs"] == [{"name": "smollm2", "port": service_port()["port"]}]


def test_the_page_quotes_the_gateways_limits() -> None:
    text = PAGE.read_text()
    expected = (
        f"{DEFAULT_FIRST_TOKEN_TIMEOUT_S:g} s to the first token, {DEFAULT_INTER_TOKEN_TIMEOUT_S:g} s between\n"
        f"  tokens, {DEFAULT_REQUEST_TIMEOUT_S:g} s for the whole request"
    )
    assert expected in text
    assert f"Request bodies up to {max_body_bytes() // 2**20} MiB" in text


def gateway_api_crd(name: str) -> Path:
    """A Standard-channel CRD from Gateway API's Go module, downloaded into the project's Go module cache."""
    goenv = REPO / "hack" / "kube-testbin" / "goenv.sh"
    done = subprocess.run(
        ["bash", "-c", f'source "{goenv}" && cd "$(mktemp -d)" && go mod download -json {GATEWAY_API}'],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )
    assert done.returncode == 0, f"go mod download {GATEWAY_API} failed: {done.stdout}{done.stderr}"
    return Path(json.loads(done.stdout)["Dir"]) / "config" / "crd" / "standard" / name


@pytest.mark.kube
def test_the_apiserver_accepts_both(kube_apiserver: ControlPlane) -> None:
    plane = kube_apiserver
    crd = gateway_api_crd("gateway.networking.k8s.io_httproutes.yaml")
    plane.kubectl("apply", "--server-side", "-f", str(crd))
    for kind, manifest in manifests().items():  # kubectl's discovery learns of a new CRD's kind after a moment

        def dry_run(manifest: dict[str, Any] = manifest) -> subprocess.CompletedProcess[str]:
            return plane.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest), check=False)

        eventually(
            lambda: dry_run().returncode == 0,
            timeout=30,
            what=f"the apiserver accepting docs/expose.md's {kind}",
            detail=lambda: dry_run().stderr,
        )
