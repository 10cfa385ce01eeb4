"""What the operator deploys is locked down: engine and gateway pods run non-root on a read-only root
filesystem with nothing to escalate to, only the gateway and Prometheus reach the engines, and the gateway
demands an API key even when the spec names none (the generated key's Secret is a tenants file it loads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shoal.gateway.auth import ApiKeys
from shoal.operator.builders import build_children
from shoal.operator.builders.api_keys import api_key_secret_ref, generated_api_key_secret, new_api_key
from shoal.operator.naming import ENGINE_PORT, Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")


def spec(**overrides: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **overrides})


def child(s: InferenceDeploymentSpec, kind: str, name: str) -> dict[str, Any]:
    built = build_children(OWNER, s, 1, prometheus_operator=False)
    return next(c for c in built if (c["kind"], c["metadata"]["name"]) == (kind, name))


def test_engine_and_gateway_pods_are_locked_down() -> None:
    for name in ("chat-engine", "chat-gateway"):
        pod = child(spec(), "Deployment", name)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        # the one writable place (caches, temporary files) is an emptyDir at /tmp, which is also HOME
        tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
        assert next(v for v in pod["volumes"] if v["name"] == tmp["name"]) == {"name": tmp["name"], "emptyDir": {}}
        assert {"name": "HOME", "value": "/tmp"} in container["env"]


def test_user_env_comes_after_the_scratch_home() -> None:
    container = child(spec(engine={"env": [{"name": "HOME", "value": "/data"}]}), "Deployment", "chat-engine")["spec"][
        "template"
    ]["spec"]["containers"][0]
    assert [e["value"] for e in container["env"] if e["name"] == "HOME"] == ["/tmp", "/data"]  # the last one wins


def test_only_the_gateway_and_prometheus_reach_the_engines() -> None:
    s = spec(networkPolicy={"prometheusPodLabels": {"app": "prom", "team": "obs"}})
    policy = child(s, "NetworkPolicy", "chat-engine")["spec"]
    engine = child(s, "Deployment", "chat-engine")["spec"]["template"]["metadata"]["labels"]
    gateway = child(s, "Deployment", "chat-gateway")["spec"]["template"]["metadata"]["labels"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"].items() <= engine.items()
    (from_gateway,), (from_prometheus,) = (rule["from"] for rule in policy["ingress"])
    assert from_gateway["podSelector"]["matchLabels"].items() <= gateway.items()
    assert not from_gateway["podSelector"]["matchLabels"].items() <= engine.items()
    assert from_prometheus == {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "prom", "team": "obs"}}}
    assert all(rule["ports"] == [{"protocol": "TCP", "port": ENGINE_PORT}] for rule in policy["ingress"])


def test_prometheus_is_found_by_its_usual_label_by_default() -> None:
    (_, from_prometheus) = child(spec(), "NetworkPolicy", "chat-engine")["spec"]["ingress"]
    assert from_prometheus["from"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


def test_gateway_auth_is_on_without_an_api_key_secret(tmp_path: Path) -> None:
    s = spec()
    ref = api_key_secret_ref(OWNER, s)
    assert (ref.name, ref.key) == ("chat-api-keys", "api-keys")
    deployment = child(s, "Deployment", "chat-gateway")["spec"]["template"]["spec"]
    assert {"name": "api-keys", "secret": {"secretName": "chat-api-keys"}} in deployment["volumes"]
    settings = child(s, "ConfigMap", "chat-gateway")["data"]
    assert settings["SHOAL_GATEWAY_API_KEYS"] == "/etc/shoal/api-keys/api-keys"

    key = new_api_key()
    secret = generated_api_key_secret(OWNER, key)
    assert (
        secret["metadata"]["name"] == "chat-api-keys" and secret["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    )
    tenants = tmp_path / "api-keys"
    tenants.write_text(secret["stringData"]["api-keys"])
    keys = ApiKeys.from_file(tenants)  # what the gateway loads at start
    assert keys.enabled and keys.tenant_for(None) is None and keys.tenant_for("Bearer sk-wrong") is None
    tenant = keys.tenant_for(f"Bearer {key}")
    assert tenant is not None and tenant.name == "default"


def test_generated_keys_are_long_and_never_repeat() -> None:
    keys = {new_api_key() for _ in range(100)}
    assert len(keys) == 100 and all(len(k) >= 40 for k in keys)


def test_a_given_secret_is_used_and_none_is_generated() -> None:
    s = spec(gateway={"apiKeySecret": {"name": "mine", "key": "tenants.yaml"}})
    assert api_key_secret_ref(OWNER, s).name == "mine"
    volumes = child(s, "Deployment", "chat-gateway")["spec"]["template"]["spec"]["volumes"]
    assert [v["secret"]["secretName"] for v in volumes if "secret" in v] == ["mine"]


def test_the_fetch_init_containers_are_locked_down_too() -> None:
    s = spec(model={"source": "hf://org/model", "credentialsSecret": "hub-token"})
    for name in ("chat-engine", "chat-gateway"):
        pod = child(s, "Deployment", name)["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        assert init["securityContext"] == pod["containers"][0]["securityContext"]
        assert init["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": "HOME", "value": "/tmp"} in init["env"]
        assert "/tmp" in {m["mountPath"] for m in init["volumeMounts"]}
