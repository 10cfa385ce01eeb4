"""API keys -> tenants, and each model's quotas, from a YAML or JSON file (mounted from a Secret in Kubernetes).

    tenants:
      acme:
        api_keys: [sk-acme-1, sk-acme-2]
        requests_per_minute: 600      # optional, each of the three
        tokens_per_minute: 200000
        max_concurrent: 16
    models:                           # optional: a served model's (a LoRA adapter's) quota, whoever asks
      sql-lora:
        requests_per_minute: 120

Keys are held as SHA-256 digests and looked up by digest, so a lookup's timing says nothing about how much of
a wrong key matched, and the keys themselves never sit in memory dumps or logs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shoal.gateway.quota import Limits

ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Tenant:
    name: str
    limits: Limits = Limits()


class KeyFileError(ValueError):
    """The keys file is malformed; the message names the entry."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _limit(entry: dict[str, Any], field: str, where: str) -> int | None:
    value = entry.get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise KeyFileError(f"{where}.{field} must be a non-negative integer, got {value!r}")
    return value


LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent")


def _limits(entry: dict[str, Any], where: str) -> Limits:
    return Limits(*(_limit(entry, field, where) for field in LIMIT_FIELDS))


def _model_limits(models: Any) -> dict[str, Limits]:
    """The ``models`` section: each served model's quota (no other fields, so a misspelt limit is named)."""
    if models is None:
        return {}
    if not isinstance(models, dict):
        raise KeyFileError("models must be a mapping 'models: {name: {requests_per_minute: ...}}'")
    parsed: dict[str, Limits] = {}
    for name, entry in models.items():
        if not isinstance(entry, dict):
            raise KeyFileError(f"models.{name} must be a mapping of limits")
        unknown = sorted(set(entry) - set(LIMIT_FIELDS))
        if unknown:
            raise KeyFileError(f"models.{name}.{unknown[0]} is not a limit; use {', '.join(LIMIT_FIELDS)}")
        parsed[str(name)] = _limits(entry, f"models.{name}")
    return parsed


class ApiKeys:
    """Who a bearer token belongs to, and the file's quotas per model (``model_limits``). An empty set of keys (no
    file given) lets everyone in as one tenant."""

    def __init__(
        self,
        tenants: dict[str, tuple[list[str], Limits]] | None = None,
        anonymous_limits: Limits = Limits(),
        model_limits: dict[str, Limits] | None = None,
    ) -> None:
        self._by_digest: dict[bytes, Tenant] = {}
        self.anonymous = Tenant(ANONYMOUS, anonymous_limits)
        self.model_limits = model_limits or {}
        for name, (keys, limits) in (tenants or {}).items():
            tenant = Tenant(name, limits)
            for key in keys:
                self._by_digest[_digest(key)] = tenant

    @property
    def enabled(self) -> bool:
        return bool(self._by_digest)

    def tenant_for(self, authorization: str | None) -> Tenant | None:
        """The tenant of an ``Authorization: Bearer <key>`` header, or ``None`` for a missing/unknown key."""
        if not self.enabled:
            return self.anonymous
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        return self._by_digest.get(_digest(authorization[7:].strip()))

    @classmethod
    def from_file(cls, path: str | Path) -> ApiKeys:
        data = yaml.safe_load(Path(path).read_text()) or {}
        tenants = data.get("tenants") if isinstance(data, dict) else None
        if not isinstance(tenants, dict) or not tenants:
            raise KeyFileError(f"{path}: expected a mapping 'tenants: {{name: {{api_keys: [...]}}}}'")
        parsed: dict[str, tuple[list[str], Limits]] = {}
        for name, entry in tenants.items():
            if not isinstance(entry, dict):
                raise KeyFileError(f"tenants.{name} must be a mapping")
            keys = entry.get("api_keys")
            if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
                raise KeyFileError(f"tenants.{name}.api_keys must be a non-empty list of strings")
            parsed[str(name)] = (keys, _limits(entry, f"tenants.{name}"))
        return cls(parsed, model_limits=_model_limits(data.get("models")))
