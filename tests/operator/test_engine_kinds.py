"""``spec.engine.kind``: each kind's container (command, flags, probes, image), the gateway told the kind, and
the fields a kind cannot honour refused by the apiserver and by the models in the same words."""

from __future__ import annotations

import json
from typing import Any

import pytest
from operator_harness import REPO, OperatorProcess, apply, children_of, condition, eventually, example, get, wait_ready
from pydantic import ValidationError
from support.kube_testbed import ControlPlane

from shoal.engine_kinds.vllm import KV_EVENTS_PORT, KV_EVENTS_TOPIC
from shoal.operator.builders import build_children
from shoal.operator.diagnosis import diagnose
from shoal.operator.naming import ENGINE_PORT, Owner
from shoal.operator.spec import DEFAULT_ENGINE_IMAGES, InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")
VLLM = {
    "model": {"source": "pvc://models/qwen3-8b", "servedName": "qwen3"},
    "engine": {"kind": "vllm", "resources": {"gpus": 4}, "maxModelLen": 8192, "extraArgs": ["--enable-lora"]},
}


def built(spec: dict[str, Any], **images: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(the engine container, the gateway's ConfigMap data)."""
    objects = build_children(
        OWNER, InferenceDeploymentSpec.model_validate(spec), 1, prometheus_operator=False, engine_images=images
    )
    by = {(c["kind"], c["metadata"]["name"]): c for c in objects}
    (container,) = by[("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"]
    return container, by[("ConfigMap", "chat-gateway")]["data"]


def test_a_vllm_engine_runs_vllm_serve_sharded_over_its_gpus_with_its_health_path() -> None:
    container, gateway = built(VLLM)
    assert container["command"] == ["vllm"]
    args = container["args"]
    assert args[:2] == ["serve", "/model-pvc/qwen3-8b"] and args[-1] == "--enable-lora"  # extraArgs still append
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert args[args.index("--max-model-len") + 1] == "8192" and args[args.index("--port") + 1] == str(ENGINE_PORT)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health", probe
    assert container["image"] == DEFAULT_ENGINE_IMAGES["vllm"][0]  # the GPU build
    assert gateway["SHOAL_GATEWAY_ENGINE_KIND"] == "vllm"


def test_a_vllm_engine_publishes_its_kv_cache_on_a_port_the_gateway_finds_and_may_reach() -> None:
    objects = build_children(OWNER, InferenceDeploymentSpec.model_validate(VLLM), 1, prometheus_operator=False)
    by = {(c["kind"], c["metadata"]["name"]): c for c in objects}
    (container,) = by[("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    config = json.loads(args[args.index("--kv-events-config") + 1])
    assert config == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        "replay_endpoint": f"tcp://*:{KV_EVENTS_PORT + 1}",
        "topic": KV_EVENTS_TOPIC,
    }
    assert args[args.index("--block-size") + 1] == "16"  # vLLM's own on a GPU, given: the gateway hashes with it
    assert {"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"} in container["ports"]
    assert {"name": "kv-replay", "containerPort": KV_EVENTS_PORT + 1, "protocol": "TCP"} in container["ports"]
    service_ports = by[("Service", "chat-engine")]["spec"]["ports"]
    assert {"name": "kv-events", "port": KV_EVENTS_PORT, "targetPort": "kv-events", "protocol": "TCP"} in service_ports
    from_gateway = by[("NetworkPolicy", "chat-engine")]["spec"]["ingress"][0]
    assert from_gateway["from"][0]["podSelector"]["matchLabels"] == OWNER.selector("gateway")
    assert {"protocol": "TCP", "port": KV_EVENTS_PORT} in from_gateway["ports"]
    assert {"protocol": "TCP", "port": KV_EVENTS_PORT + 1} in from_gateway["ports"]
    on_cpu, gateway = built({**VLLM, "engine": {"kind": "vllm", "resources": {"gpus": 0}}})
    assert on_cpu["args"][on_cpu["args"].index("--block-size") + 1] == "128"  # vLLM's CPU attention: multiples of 32
    assert gateway["SHOAL_GATEWAY_BLOCK_SIZE"] == "128"  # the gateway hashes prompts as vLLM names its blocks
    shoal_spec = InferenceDeploymentSpec.model_validate({**VLLM, "engine": {}})
    shoal = build_children(OWNER, shoal_spec, 1, prometheus_operator=False)
    assert "kv-events" not in json.dumps(shoal) and str(KV_EVENTS_PORT) not in json.dumps(shoal)


def test_the_image_is_the_specs_then_the_operators_for_the_kind_then_the_default() -> None:
    assert built(VLLM, vllm="registry.local/vllm-cpu:1")[0]["image"] == "registry.local/vllm-cpu:1"
    assert built(VLLM, shoal="registry.local/shoal:1")[0]["image"] == DEFAULT_ENGINE_IMAGES["vllm"][0]
    on_cpu = {**VLLM, "engine": {"kind": "vllm", "resources": {"gpus": 0}}}
    assert built(on_cpu)[0]["image"] == DEFAULT_ENGINE_IMAGES["vllm"][1]  # the CPU build
    mine = {**VLLM, "engine": {**VLLM["engine"], "image": "mine:2"}}
    assert built(mine, vllm="registry.local/vllm-cpu:1")[0]["image"] == "mine:2"


def test_a_shoal_engine_keeps_its_command_and_probes() -> None:
    container, gateway = built({"model": {"source": "smollm2-135m"}})
    assert container["command"] == ["shoal"] and container["args"][0] == "serve"
    assert container["startupProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert gateway["SHOAL_GATEWAY_ENGINE_KIND"] == "shoal" and gateway["SHOAL_GATEWAY_BLOCK_SIZE"] == "16"


def test_llama_server_and_sglang_containers() -> None:
    llama, _ = built({"model": {"source": "/models/m.gguf"}, "engine": {"kind": "llamacpp", "maxNumSeqs": 4}})
    assert llama["command"] == ["/app/llama-server"] and "--metrics" in llama["args"]
    assert llama["readinessProbe"]["httpGet"]["path"] == "/health"
    sglang, _ = built({"model": {"source": "/models/m"}, "engine": {"kind": "sglang", "resources": {"gpus": 2}}})
    assert sglang["command"] == ["python3"] and sglang["args"][:2] == ["-m", "sglang.launch_server"]
    assert sglang["args"][sglang["args"].index("--tp-size") + 1] == "2"


@pytest.mark.parametrize(
    ("kind", "source", "flag"),
    [
        ("shoal", "smollm2-135m", "--gpu-memory-utilization"),
        ("vllm", "/models/m", "--gpu-memory-utilization"),
        ("sglang", "/models/m", "--mem-fraction-static"),
    ],
)
def test_gpu_memory_utilization_is_each_kinds_own_flag(kind: str, source: str, flag: str) -> None:
    engine = {"kind": kind, "resources": {"gpus": 1}, "gpuMemoryUtilization": 0.85}
    args = built({"model": {"source": source}, "engine": engine})[0]["args"]
    assert args[args.index(flag) + 1] == "0.85"
    unset = built({"model": {"source": source}, "engine": {"kind": kind, "resources": {"gpus": 1}}})[0]["args"]
    assert flag not in unset  # the engine's own default


@pytest.mark.parametrize(
    ("kind", "source", "flag"),
    [
        ("shoal", "smollm2-135m", "--enforce-eager"),
        ("vllm", "/models/m", "--enforce-eager"),
        ("sglang", "/models/m", "--disable-cuda-graph"),
    ],
)
def test_enforce_eager_is_each_kinds_own_switch(kind: str, source: str, flag: str) -> None:
    engine = {"kind": kind, "resources": {"gpus": 1}, "enforceEager": True}
    assert flag in built({"model": {"source": source}, "engine": engine})[0]["args"]
    engine["enforceEager"] = False
    assert flag not in built({"model": {"source": source}, "engine": engine})[0]["args"]
    assert flag not in built({"model": {"source": source}, "engine": {"kind": kind}})[0]["args"]  # graphs by default


def test_llamacpp_takes_enforce_eager_left_false() -> None:
    spec = {"model": {"source": "/m.gguf"}, "engine": {"kind": "llamacpp", "enforceEager": False}}
    assert "--enforce-eager" not in built(spec)[0]["args"]


@pytest.mark.parametrize("value", [0, -0.1, 1.01])
def test_the_models_refuse_a_gpu_memory_utilization_outside_zero_to_one(value: float) -> None:
    with pytest.raises(ValidationError, match=r"engine\.gpuMemoryUtilization"):
        InferenceDeploymentSpec.model_validate({"model": {"source": "/m"}, "engine": {"gpuMemoryUtilization": value}})


REFUSED = [
    (
        {"kind": "shoal", "resources": {"gpus": 2}},
        "/models/m",
        "engine.kind shoal cannot honour spec.engine.resources.gpus",
    ),
    (
        {"kind": "llamacpp", "resources": {"gpus": 2}},
        "/m.gguf",
        "engine.kind llamacpp cannot honour spec.engine.resources.gpus",
    ),
    ({"kind": "llamacpp", "dtype": "float16"}, "/m.gguf", "engine.kind llamacpp cannot honour spec.engine.dtype"),
    ({"kind": "llamacpp", "blockSize": 32}, "/m.gguf", "engine.kind llamacpp cannot honour spec.engine.blockSize"),
    (
        {"kind": "llamacpp", "kvCacheMemory": "1Gi"},
        "/m.gguf",
        "engine.kind llamacpp cannot honour spec.engine.kvCacheMemory",
    ),
    (
        {"kind": "sglang", "kvCacheMemory": "8Gi"},
        "/models/m",
        "engine.kind sglang cannot honour spec.engine.kvCacheMemory",
    ),
    (
        {"kind": "llamacpp", "gpuMemoryUtilization": 0.8},
        "/m.gguf",
        "engine.kind llamacpp cannot honour spec.engine.gpuMemoryUtilization",
    ),
    (
        {"kind": "llamacpp", "enforceEager": True},
        "/m.gguf",
        "engine.kind llamacpp cannot honour spec.engine.enforceEager",
    ),
    ({"kind": "vllm"}, "smollm2-135m", "engine.kind vllm cannot honour spec.model.source"),
]
IDS = [
    "shoal-gpus",
    "llamacpp-gpus",
    "llamacpp-dtype",
    "llamacpp-block",
    "llamacpp-kv",
    "sglang-kv",
    "llamacpp-gpu-memory-utilization",
    "llamacpp-enforce-eager",
    "vllm-alias",
]


@pytest.mark.parametrize(("engine", "source", "message"), REFUSED, ids=IDS)
def test_the_models_refuse_what_a_kind_cannot_honour(engine: dict[str, Any], source: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace(".", "[.]")):
        InferenceDeploymentSpec.model_validate({"model": {"source": source}, "engine": engine})


def test_an_unknown_kind_lists_the_supported_ones() -> None:
    with pytest.raises(ValidationError, match="'shoal', 'vllm', 'sglang' or 'llamacpp'"):
        InferenceDeploymentSpec.model_validate({"model": {"source": "/m"}, "engine": {"kind": "tgi"}})


@pytest.mark.kube
@pytest.mark.parametrize(("engine", "source", "message"), REFUSED, ids=IDS)
def test_the_apiserver_refuses_what_a_kind_cannot_honour(
    installed_chart: ControlPlane, engine: dict[str, Any], source: str, message: str
) -> None:
    body = example("refused", engine=engine, model={"source": source})
    result = apply(installed_chart, "default", body)
    assert result.returncode != 0 and message in result.stderr, result.stderr


@pytest.mark.kube
def test_the_apiserver_takes_tensor_parallelism_for_vllm_and_an_unknown_kind_is_named(
    installed_chart: ControlPlane,
) -> None:
    example_file = REPO / "examples" / "vllm-tensor-parallel.yaml"
    result = installed_chart.kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(example_file), check=False)
    assert result.returncode == 0, result.stderr
    result = apply(installed_chart, "default", example("tgi", engine={"kind": "tgi"}))
    assert result.returncode != 0
    assert 'spec.engine.kind: Unsupported value: "tgi": supported values: "shoal", "vllm", "sglang", "llamacpp"' in (
        result.stderr
    )


@pytest.mark.kube
@pytest.mark.timeout(180)
def test_the_operator_runs_a_vllm_fleet_with_vllms_command_and_probes(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    body = example(
        "vllm",
        model={"source": "/models/smollm2", "servedName": "smollm2"},
        engine={"kind": "vllm", "resources": {"gpus": 0}},
    )
    assert apply(installed_chart, namespace, body).returncode == 0
    deployment = eventually(lambda: children_of(installed_chart, namespace, "vllm").get("deployment/vllm-engine"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["vllm"] and container["args"][:2] == ["serve", "/models/smollm2"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    service = get(installed_chart, namespace, "service", "vllm-engine")
    assert service is not None and "kv-events" in [p["name"] for p in service["spec"]["ports"]]
    config = get(installed_chart, namespace, "configmap", "vllm-gateway")
    assert config is not None and config["data"]["SHOAL_GATEWAY_ENGINE_KIND"] == "vllm"
    infd = wait_ready(installed_chart, namespace, "vllm")  # the test bed's pods pass any probe
    assert condition(infd, "Ready")["message"] == "1/1 engines and 1/1 gateways ready"


def test_a_pod_problem_names_the_engine_kind() -> None:
    """The pod status is the kubelet's shape for an image that cannot be pulled (the test bed pulls nothing)."""
    pod = {
        "metadata": {"name": "chat-engine-5d8f7c9b6-x2x9z"},
        "status": {
            "containerStatuses": [
                {
                    "name": "engine",
                    "image": "vllm/vllm-openai:v0.0.0",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "manifest unknown"}},
                }
            ]
        },
    }
    problem = diagnose("/models/m", [pod], "vllm")
    assert problem is not None and problem.reason == "ImagePullFailed"
    assert problem.message.startswith("engine.kind vllm: pod chat-engine-5d8f7c9b6-x2x9z: image 'vllm/vllm-openai")
    assert not diagnose("/models/m", [pod]).message.startswith("engine.kind")  # type: ignore[union-attr]
