"""Spec -> children: the pure builders the reconciler applies."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shoal.operator.builders import applied_digest, build_children
from shoal.operator.builders.engine import serve_args
from shoal.operator.naming import Owner
from shoal.operator.spec import DEFAULT_GATEWAY_IMAGE, InferenceDeploymentSpec
from shoal.operator.spec import DEFAULT_GPU_RESOURCE as GPU_RESOURCE
from shoal.operator.standby_pool import POOL_LABEL

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")


def spec(**overrides: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **overrides})


def children(s: InferenceDeploymentSpec, replicas: int = 2, monitoring: bool = False) -> dict[tuple[str, str], Any]:
    built = build_children(OWNER, s, replicas, prometheus_operator=monitoring)
    return {(c["kind"], c["metadata"]["name"]): c for c in built}


def test_every_child_is_owned_and_labelled() -> None:
    built = build_children(OWNER, spec(), 2, prometheus_operator=True)
    assert {(c["kind"], c["metadata"]["name"]) for c in built} == {
        ("ServiceAccount", "chat-gateway"),
        ("Role", "chat-gateway"),
        ("RoleBinding", "chat-gateway"),
        ("Service", "chat-engine"),
        ("Deployment", "chat-engine"),
        ("ConfigMap", "chat-gateway"),
        ("Deployment", "chat-gateway"),
        ("Service", "chat"),
        ("PodMonitor", "chat-engine"),
        ("PodMonitor", "chat-gateway"),
        ("PrometheusRule", "chat"),
        ("NetworkPolicy", "chat-engine"),
        ("PodDisruptionBudget", "chat-engine"),
        ("PodDisruptionBudget", "chat-gateway"),
    }
    for child in built:
        meta = child["metadata"]
        assert meta["namespace"] == "team-a"
        (ref,) = meta["ownerReferences"]
        assert ref == {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "name": "chat",
            "uid": OWNER.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "shoal-operator"


def test_monitoring_objects_only_with_the_prometheus_operator() -> None:
    kinds = {kind for kind, _ in children(spec(), monitoring=False)}
    assert "PodMonitor" not in kinds and "PrometheusRule" not in kinds
    pod_annotations = children(spec())[("Deployment", "chat-engine")]["spec"]["template"]["metadata"]["annotations"]
    assert pod_annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
    }


def test_engine_deployment_runs_shoal_serve_with_the_spec() -> None:
    s = spec(
        engine={
            "dtype": "bfloat16",
            "blockSize": 32,
            "maxModelLen": 4096,
            "maxNumSeqs": 128,
            "kvCacheMemory": "8Gi",
            "extraArgs": ["--enable-prefix-caching"],
        }
    )
    deployment = children(s, replicas=3)[("Deployment", "chat-engine")]
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["shoal"]
    args = container["args"]
    assert args[0] == "serve"
    flags = dict(zip(args[1::2], args[2::2], strict=False))
    assert flags["--model"] == "smollm2-135m" and flags["--host"] == "0.0.0.0" and flags["--port"] == "8000"
    assert flags["--dtype"] == "bfloat16" and flags["--block-size"] == "32" and flags["--max-model-len"] == "4096"
    assert flags["--max-num-seqs"] == "128" and flags["--kv-cache-bytes"] == str(8 * 2**30)
    assert args[-1] == "--enable-prefix-caching"


def test_engine_probes_wait_for_the_model_then_watch_liveness() -> None:
    s = spec(engine={"startupSeconds": 900})
    (container,) = children(s)[("Deployment", "chat-engine")]["spec"]["template"]["spec"]["containers"]
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/ready"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 900
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"


def test_gpu_request_limits_and_toleration() -> None:
    s = spec(engine={"resources": {"gpus": 1, "cpu": "8", "memory": "32Gi"}})
    pod = children(s)[("Deployment", "chat-engine")]["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "8", "memory": "32Gi", GPU_RESOURCE: "1"}
    assert resources["requests"] == resources["limits"]
    assert {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert serve_args(s)[serve_args(s).index("--attention-backend") + 1] == "triton"
    assert serve_args(s)[serve_args(s).index("--device") + 1] == "cuda"


def test_cpu_engine_asks_for_no_gpu() -> None:
    s = spec(engine={"resources": {"gpus": 0}})
    pod = children(s)[("Deployment", "chat-engine")]["spec"]["template"]["spec"]
    assert GPU_RESOURCE not in str(pod["containers"][0]["resources"]) and pod["tolerations"] == []
    assert "--attention-backend" not in serve_args(s)  # the engine's default: the C kernel, else torch's
    assert serve_args(s)[serve_args(s).index("--device") + 1] == "cpu"


def test_engine_pods_spread_and_drain_gracefully() -> None:
    deployment = children(spec())[("Deployment", "chat-engine")]
    pod = deployment["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    assert pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_engine_service_is_headless_over_the_serving_engine_pods() -> None:
    built = children(spec())
    service, deployment = built[("Service", "chat-engine")], built[("Deployment", "chat-engine")]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {**deployment["spec"]["selector"]["matchLabels"], POOL_LABEL: "serving"}
    # new pods serve by their template (the operator moves some into the pool); the Deployment keeps them all
    assert deployment["spec"]["template"]["metadata"]["labels"][POOL_LABEL] == "serving"
    assert POOL_LABEL not in deployment["spec"]["selector"]["matchLabels"]


def test_gateway_arguments_come_from_its_config_map() -> None:
    s = spec(
        model={"source": "smollm2-135m", "servedName": "smol"},
        gateway={
            "routingPolicy": "least-load",
            "boundFactor": 1.5,
            "replicas": 2,
            "apiKeySecret": {"name": "keys"},
            "redisUrl": "redis://redis:6379/0",
        },
    )
    built = children(s)
    data = built[("ConfigMap", "chat-gateway")]["data"]
    deployment = built[("Deployment", "chat-gateway")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert container["envFrom"] == [{"configMapRef": {"name": "chat-gateway"}}]
    referenced = re.findall(r"\$\((\w+)\)", " ".join(container["args"]))
    assert sorted(referenced) == sorted(data), "every setting is passed, and every reference resolves"
    assert data["SHOAL_GATEWAY_KUBE_SERVICE"] == "team-a/chat-engine"
    assert data["SHOAL_GATEWAY_POLICY"] == "least-load" and data["SHOAL_GATEWAY_BOUND_FACTOR"] == "1.5"
    assert data["SHOAL_GATEWAY_TOKENIZER"] == "smol=smollm2-135m"
    assert data["SHOAL_GATEWAY_API_KEYS"] == "/etc/shoal/api-keys/api-keys"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/etc/shoal/api-keys" in mounts
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "chat-gateway"


def test_engine_args_parse_with_the_real_serve_cli() -> None:
    """The flags the operator writes are the flags ``shoal serve`` accepts (its parser imports nothing heavy)."""
    import argparse

    from shoal.engine.server import cli as serve_cli

    s = spec(
        model={"source": "smollm2-135m", "servedName": "smol"},
        engine={"maxModelLen": 1024, "kvCacheMemory": "512Mi", "dtype": "float32"},
    )
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    parsed = parser.parse_args(serve_args(s))
    assert (parsed.model, parsed.served_model_name, parsed.host, parsed.port) == (
        "smollm2-135m",
        ["smol"],
        "0.0.0.0",
        8000,
    )
    assert (parsed.max_model_len, parsed.kv_cache_bytes, parsed.dtype) == (1024, 512 * 2**20, "float32")


def test_gateway_args_parse_with_the_real_gateway_cli() -> None:
    """The flags the operator writes are the flags ``shoal gateway`` accepts (values substituted as kubelet does)."""
    import argparse

    from shoal.gateway import cli as gateway_cli

    s = spec(
        gateway={
            "apiKeySecret": {"name": "keys", "key": "tenants.yaml"},
            "redisUrl": "redis://r:6379/0",
            "holdQueue": {"size": 5, "waitSeconds": 30},
        }
    )
    built = children(s)
    data = built[("ConfigMap", "chat-gateway")]["data"]
    args = built[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]["containers"][0]["args"]
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: data[m.group(1)], a) for a in args]
    parser = argparse.ArgumentParser()
    gateway_cli.register(parser.add_subparsers())
    parsed = parser.parse_args(expanded)
    assert parsed.kube_service == "team-a/chat-engine" and parsed.policy == "prefix-aware"
    assert parsed.api_keys == "/etc/shoal/api-keys/tenants.yaml" and parsed.redis_url == "redis://r:6379/0"
    assert (parsed.hold_queue_size, parsed.hold_seconds) == (5, 30.0)


def test_a_gateway_setting_change_rolls_the_gateway_pods() -> None:
    def config_hash(s: InferenceDeploymentSpec) -> str:
        template = children(s)[("Deployment", "chat-gateway")]["spec"]["template"]
        return template["metadata"]["annotations"]["shoal.dev/config-hash"]

    assert config_hash(spec()) == config_hash(spec())
    assert config_hash(spec()) != config_hash(spec(gateway={"routingPolicy": "round-robin"}))


def test_the_gateway_image_is_the_specs_then_the_operators_then_the_releases() -> None:
    """The tokenizer's fetch init container runs the same image as the gateway it serves."""
    fetched = {"model": {"source": "hf://HuggingFaceTB/SmolLM2-135M-Instruct"}}

    def images(s: InferenceDeploymentSpec, operator_default: str | None) -> set[str]:
        built = build_children(OWNER, s, 1, prometheus_operator=False, gateway_image=operator_default)
        pod = next(c for c in built if c["metadata"]["name"] == "chat-gateway" and c["kind"] == "Deployment")
        pod_spec = pod["spec"]["template"]["spec"]
        return {c["image"] for c in pod_spec["containers"] + pod_spec.get("initContainers", [])}

    assert images(spec(**fetched), None) == {DEFAULT_GATEWAY_IMAGE}
    assert images(spec(**fetched), "mirror.local/shoal:0.1.0") == {"mirror.local/shoal:0.1.0"}
    mine = spec(**fetched, gateway={"image": "mine:2"})
    assert images(mine, "mirror.local/shoal:0.1.0") == {"mine:2"}


def test_gateway_role_reads_endpoint_slices_only() -> None:
    built = children(spec())
    (rule,) = built[("Role", "chat-gateway")]["rules"]
    assert rule == {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch"],
    }
    binding = built[("RoleBinding", "chat-gateway")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "chat-gateway", "namespace": "team-a"}]


def test_model_volume_is_mounted_read_only() -> None:
    s = spec(model={"source": "/models/llama/model.gguf", "volume": {"claimName": "weights"}})
    pod = children(s)[("Deployment", "chat-engine")]["spec"]["template"]["spec"]
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in pod["containers"][0]["volumeMounts"]


def test_prometheus_rule_alerts_on_this_fleet_with_its_targets() -> None:
    s = spec(autoscaling={"queueDepthPerReplica": 3, "ttftP95Seconds": 0.5})
    rule = children(s, monitoring=True)[("PrometheusRule", "chat")]
    rules = {r["alert"]: r["expr"] for r in rule["spec"]["groups"][0]["rules"]}
    assert 'shoal_engine_requests_waiting{namespace="team-a",pod=~"chat-engine-.*"}' in rules["ShoalEngineQueueBacklog"]
    assert rules["ShoalEngineQueueBacklog"].endswith("> 6")
    assert "shoal_engine_time_to_first_token_seconds_bucket" in rules["ShoalEngineTTFTHigh"]
    assert rules["ShoalEngineTTFTHigh"].endswith("> 0.5")
    assert "shoal_engine_kv_cache_usage_ratio" in rules["ShoalEngineKVCacheFull"]
    assert (
        'shoal_gateway_backend_up{namespace="team-a",pod=~"chat-gateway-.*"}' in rules["ShoalGatewayNoHealthyBackend"]
    )
    assert 'pod=~"chat-gateway-.*",status=~"5.."' in rules["ShoalGatewayHigh5xxRate"]


def test_monitoring_labels_go_on_every_prometheus_operator_object_and_keep_the_operators() -> None:
    """``--monitoring-label`` (the chart's monitoring.labels): what kube-prometheus-stack selects by. A label
    the operator sets itself is never replaced (its children are found by them)."""
    labels = {"release": "kube-prometheus-stack", "app.kubernetes.io/instance": "other"}
    built = build_children(OWNER, spec(), 1, prometheus_operator=True, monitoring_labels=labels)
    monitoring = [c for c in built if c["apiVersion"].startswith("monitoring.coreos.com/")]
    assert sorted(c["kind"] for c in monitoring) == ["PodMonitor", "PodMonitor", "PrometheusRule"]
    for child in monitoring:
        assert child["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert child["metadata"]["labels"]["app.kubernetes.io/instance"] == "chat"
    others = [c for c in built if c not in monitoring]
    assert all("release" not in c["metadata"]["labels"] for c in others)
    gateway = next(c for c in monitoring if c["metadata"]["name"] == "chat-gateway")
    deployment = next(c for c in built if (c["kind"], c["metadata"]["name"]) == ("Deployment", "chat-gateway"))
    assert gateway["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert gateway["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert any(p["name"] == "http" for p in ports), "the PodMonitor's port is the gateway container's"


@pytest.mark.parametrize("replicas", [0, 1, 7])
def test_engine_replicas_are_what_the_caller_decided(replicas: int) -> None:
    assert children(spec(), replicas=replicas)[("Deployment", "chat-engine")]["spec"]["replicas"] == replicas


@pytest.mark.parametrize("replicas", [0, 1, 7])
def test_the_engine_deployment_runs_the_standby_pool_beside_the_decided_count(replicas: int) -> None:
    pooled = spec(replicas={"min": 0, "max": 8}, autoscaling={"enabled": True, "standby": 2})
    assert children(pooled, replicas=replicas)[("Deployment", "chat-engine")]["spec"]["replicas"] == replicas + 2


def test_the_children_digest_tracks_what_is_applied_but_not_the_scale() -> None:
    def digest(s: InferenceDeploymentSpec, replicas: int = 2, monitoring: bool = False) -> str | None:
        return applied_digest(children(s, replicas, monitoring)[("Deployment", "chat-engine")])

    assert digest(spec()) is not None and digest(spec()) == digest(spec(), replicas=5)
    assert digest(spec()) != digest(spec(), monitoring=True)
    assert digest(spec()) != digest(spec(gateway={"replicas": 2}))
    assert digest(spec()) != digest(spec(engine={"image": "example.com/engine:2"}))
