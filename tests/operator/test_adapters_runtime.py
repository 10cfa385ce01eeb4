"""LoRA adapters changed at run time, counted: the chart's operator on the test bed, two engine pods run as real
``shoal serve`` processes by the process node (``support.process_node``, a kubelet stand-in), the real ``shoal
gateway`` following the engine Service's EndpointSlices, the official ``openai`` client through it.

The fleet starts with one adapter (each engine loads it from the ConfigMap before it is ready); then the list
changes (one added, one removed) and the SAME pods serve the new list (no new ReplicaSet, the operator loads and
unloads through each engine's endpoints), with ``loaded on 2 of 2`` in the status, the new adapter answered and
the removed one a 404; then an adapter of a rank above ``maxLoraRank`` is added: ``AdaptersReady`` turns False
naming it and the engine's reason, while the other adapter is still served and nothing rolls. The engines (a
tiny random Llama, random PEFT adapters written by ``peft``) are shared by the three steps."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fleet_gateway import start_gateway
from operator_harness import apply, condition, example, get
from support.kube_testbed import ControlPlane
from support.polling import eventually
from support.process_node import ProcessNode

from shoal.local import metric_values

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(360)]

NAME, MODEL = "lorarun", "tiny"
ENGINE_PODS = "app.kubernetes.io/instance=lorarun,app.kubernetes.io/component=engine"


@pytest.fixture(scope="module")
def lora_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny base model and its adapters: ``sql`` and ``chat`` fit ``maxLoraRank`` 8, ``wide`` (rank 16) not."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
    from lora_adapters import write_adapter
    from tiny_checkpoints import build_checkpoint

    root = tmp_path_factory.mktemp("lorarun")
    base = build_checkpoint(root / "base", "llama", seed=7)
    return {
        "base": base,
        "sql": write_adapter(base, root / "sql", 1, r=4, target_modules=["q_proj", "v_proj"]),
        "chat": write_adapter(base, root / "chat", 2, r=8, target_modules=["o_proj"]),
        "wide": write_adapter(base, root / "wide", 3, r=16, target_modules=["q_proj"]),
    }


def fleet_body(node: ProcessNode, files: dict[str, Path], adapters: list[str]) -> dict[str, Any]:
    body = example(
        NAME,
        model={"source": str(files["base"]), "servedName": MODEL},
        replicas={"min": 1, "max": 2, "count": 2},
        autoscaling={"enabled": False},
        gateway={"replicas": 1, "routingPolicy": "round-robin"},
        adapters=[{"name": name, "source": str(files[name])} for name in adapters],
    )
    body["spec"]["engine"] |= {"maxModelLen": 256, "maxNumSeqs": 4, "maxLoras": 2, "maxLoraRank": 8}
    body["spec"]["engine"] |= node.placement()
    return body


def engine_pods(plane: ControlPlane, namespace: str) -> dict[str, str]:
    """The engine pods' names -> uids."""
    pods = (get(plane, namespace, "pods", "-l", ENGINE_PODS) or {}).get("items", [])
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def replica_sets(plane: ControlPlane, namespace: str) -> list[str]:
    return [r["metadata"]["name"] for r in (get(plane, namespace, "rs", "-l", ENGINE_PODS) or {}).get("items", [])]


def adapters_status(plane: ControlPlane, namespace: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    infd = get(plane, namespace, "infd", NAME)
    return ((infd or {}).get("status") or {}).get("adapters") or [], condition(infd, "AdaptersReady")


def loaded_everywhere(plane: ControlPlane, namespace: str, names: list[str]) -> bool:
    adapters, ready = adapters_status(plane, namespace)
    want = [{"name": n, "loadedReplicas": 2, "replicas": 2} for n in names]
    return adapters == want and ready.get("status") == "True"


def served_adapters(url: str) -> set[str]:
    cards = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
    return {c["id"] for c in cards if c.get("parent") == MODEL}


def answers(client: openai.OpenAI, model: str) -> bool:
    """A completion through the adapter; False while the gateway does not know it yet (a 404)."""
    try:
        reply = client.chat.completions.create(model=model, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    except openai.NotFoundError:
        return False
    return reply.model == model and reply.usage is not None and reply.usage.completion_tokens > 0


def not_found(client: openai.OpenAI, model: str) -> str | None:
    """The 404's message for a request naming ``model``; None while it is still served."""
    try:
        client.chat.completions.create(model=model, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    except openai.NotFoundError as error:
        return str(error)
    return None


def test_adapters_change_on_the_running_engines_without_a_roll(
    operator: Any,
    process_node: ProcessNode,
    installed_chart: ControlPlane,
    namespace: str,
    lora_files: dict[str, Path],
    tmp_path: Path,
) -> None:
    plane = installed_chart
    result = apply(plane, namespace, fleet_body(process_node, lora_files, ["sql"]))
    assert result.returncode == 0, result.stderr
    gateway, api_key = start_gateway(plane, namespace, NAME, tmp_path)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(gateway.stop)
        eventually(
            lambda: int(sum(metric_values(gateway.url, "shoal_gateway_backend_up").values())) == 2,
            240,
            "both engine processes ready and routed by the gateway",
            interval=1,
            detail=lambda: process_node.log_tail(1500) + "\n" + gateway.log(2000),
        )
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=api_key, max_retries=0, timeout=60)
        eventually(lambda: loaded_everywhere(plane, namespace, ["sql"]), 60, "sql loaded on 2 of 2")
        assert eventually(lambda: answers(client, "sql"), 30, "sql served through the gateway")
        pods, sets = engine_pods(plane, namespace), replica_sets(plane, namespace)
        assert len(pods) == 2 and len(sets) == 1
        engines = [p for p in process_node.pods.values() if p.namespace == namespace]

        # one added, one removed: the operator loads chat and unloads sql on the same two engines
        assert apply(plane, namespace, fleet_body(process_node, lora_files, ["chat"])).returncode == 0
        eventually(
            lambda: loaded_everywhere(plane, namespace, ["chat"]),
            60,
            "chat loaded on 2 of 2",
            detail=lambda: str(adapters_status(plane, namespace)),
        )
        assert [served_adapters(e.url) for e in engines] == [{"chat"}, {"chat"}]
        configmap = get(plane, namespace, "configmap", f"{NAME}-adapters") or {}
        assert f'"path": "{lora_files["chat"]}"' in configmap["data"]["adapters.json"]
        assert eventually(lambda: answers(client, "chat"), 30, "chat served through the gateway")
        assert "sql" in eventually(lambda: not_found(client, "sql"), 30, "sql gone: a 404 naming it")

        # an adapter the engines refuse: named in the status with their reason; chat still served
        body = fleet_body(process_node, lora_files, ["chat", "wide"])
        assert apply(plane, namespace, body).returncode == 0
        refused = eventually(
            lambda: (ready := adapters_status(plane, namespace)[1]).get("reason") == "LoadFailed" and ready,
            60,
            "AdaptersReady False naming wide",
        )
        assert refused["status"] == "False" and "adapter 'wide'" in refused["message"], refused
        assert "has rank 16, more than --max-lora-rank 8" in refused["message"], refused
        adapters, _ = adapters_status(plane, namespace)
        assert adapters == [
            {"name": "chat", "loadedReplicas": 2, "replicas": 2},
            {"name": "wide", "loadedReplicas": 0, "replicas": 2},
        ]
        assert answers(client, "chat")
        assert engine_pods(plane, namespace) == pods and replica_sets(plane, namespace) == sets, "nothing rolled"
        assert all(not e.deleting and e.process is not None and e.process.poll() is None for e in engines)
