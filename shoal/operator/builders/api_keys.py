"""Gateway auth is on by default: without ``spec.gateway.apiKeySecret`` the operator generates a Secret,
``<name>-api-keys``, holding a tenants file (the format of :mod:`shoal.gateway.auth`) with one random key.

The operator creates that Secret once and never reads or rewrites it (it holds no ``get`` on Secrets): a key
that changed on every reconcile would lock clients out. The key is made at the edge and handed in, so the
builder stays pure; deleting the Secret and changing the spec makes a new one."""

from __future__ import annotations

import secrets
from typing import Any

import yaml

from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec, SecretKeyRef

COMPONENT = "gateway"
GENERATED_KEY = "api-keys"
GENERATED_TENANT = "default"


def generated_secret_name(owner: Owner) -> str:
    return f"{owner.name}-api-keys"


def api_key_secret_ref(owner: Owner, spec: InferenceDeploymentSpec) -> SecretKeyRef:
    """The Secret the gateway reads its tenants file from: the one given, or the generated one."""
    given = spec.gateway.api_key_secret
    return given if given is not None else SecretKeyRef(name=generated_secret_name(owner), key=GENERATED_KEY)


def new_api_key() -> str:
    return "sk-shoal-" + secrets.token_urlsafe(32)


def generated_api_key_secret(owner: Owner, api_key: str) -> dict[str, Any]:
    tenants = {"tenants": {GENERATED_TENANT: {"api_keys": [api_key]}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": owner.metadata(generated_secret_name(owner), COMPONENT),
        "stringData": {GENERATED_KEY: yaml.safe_dump(tenants)},
    }
