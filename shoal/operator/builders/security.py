"""How engine and gateway pods run: as a non-root user, read-only root filesystem, no privilege escalation, no
capabilities, the runtime's default seccomp profile. What must be writable (caches, temporary files) goes to an
emptyDir at /tmp, which is also HOME, so torch, Triton and Hugging Face caches land there."""

from __future__ import annotations

from typing import Any

RUN_AS_USER = 65532  # the images' non-root user (docker/deps.Dockerfile)
SCRATCH_DIR = "/tmp"
SCRATCH_VOLUME: dict[str, Any] = {"name": "tmp", "emptyDir": {}}
SCRATCH_MOUNT: dict[str, Any] = {"name": "tmp", "mountPath": SCRATCH_DIR}
SCRATCH_ENV: list[dict[str, str]] = [{"name": "HOME", "value": SCRATCH_DIR}]


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
