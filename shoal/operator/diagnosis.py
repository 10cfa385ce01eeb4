"""Why an InferenceDeployment cannot work, from facts the apiserver cannot check: the model alias, and what
its engine pods report (image pulls, scheduling, a failed model fetch, crash loops).

A crash loop quotes the container's last termination: its exit code, reason and message. The engine container's
``terminationMessagePolicy: FallbackToLogsOnError`` makes that message the tail of its log when it wrote no
termination message, so the status says why the engine exits (a bad flag, out of memory), not only that it does.

Each finding is a (reason, message) pair for the Degraded condition and an Event; the message names the pod
and quotes the kubelet's or scheduler's own words, so the user reads exactly what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.engine_kinds import DEFAULT_KIND
from shoal.model_registry import ALIASES
from shoal.operator.model_ready import fetch_failure
from shoal.operator.spec import DEFAULT_GPU_RESOURCE

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CRASH_LINES = 5  # of a crashed container's termination message (its log's tail), quoted in the condition
CRASH_CHARS = 600


@dataclass(frozen=True)
class Problem:
    reason: str
    message: str


def looks_like_alias(source: str) -> bool:
    """A bare name (no path separator, no URI scheme) can only be a bundled alias: the CRD refuses relative paths,
    so ``weights.gguf`` is a misspelt alias or a path missing its directory."""
    return "/" not in source and "://" not in source


def check_model(source: str) -> Problem | None:
    if looks_like_alias(source) and source not in ALIASES:
        known = ", ".join(sorted(ALIASES))
        return Problem(
            "ModelNotFound",
            f"spec.model.source {source!r} is not a known model alias (known: {known}); "
            "give an alias, hf://ORG/REPO, s3://BUCKET/PREFIX, pvc://CLAIM/PATH or an absolute path to a "
            "Hugging Face directory or a .gguf file",
        )
    return None


def last_termination(container: Mapping[str, Any]) -> str:
    """How a container last ended, from its status: "exit code 1 (Error): <its last lines>", or "" if unknown."""
    ended = (container.get("lastState") or {}).get("terminated") or {}
    if not ended:
        return ""
    lines = [line for line in str(ended.get("message", "")).splitlines() if line.strip()][-CRASH_LINES:]
    said = " | ".join(lines)[-CRASH_CHARS:]
    how = f"exit code {ended.get('exitCode', '?')}" + (f" ({ended['reason']})" if ended.get("reason") else "")
    return f"{how}: {said}" if said else how


def diagnose_pod(pod: Mapping[str, Any], gpu_resource: str = DEFAULT_GPU_RESOURCE) -> Problem | None:
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status", {})
    for cond in status.get("conditions", []):
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == ("PodScheduled", "False", "Unschedulable"):
            message = cond.get("message", "")
            reason = "InsufficientGPU" if f"Insufficient {gpu_resource}" in message else "Unschedulable"
            return Problem(reason, f"pod {name} cannot be scheduled: {message}")
    failure = fetch_failure(pod)
    if failure is not None:
        return Problem("FetchFailed", f"pod {name}: the fetch-model init container failed: {failure}")
    for container in status.get("containerStatuses", []) + status.get("initContainerStatuses", []):
        waiting = container.get("state", {}).get("waiting") or {}
        why = waiting.get("reason")
        if why in IMAGE_PULL_REASONS:
            return Problem(
                "ImagePullFailed",
                f"pod {name}: image {container.get('image', '?')!r} cannot be pulled ({why}): "
                f"{waiting.get('message', '')}".rstrip(": "),
            )
        if why == "CreateContainerConfigError":  # a Secret or ConfigMap it needs is missing
            return Problem(
                "ContainerConfigError",
                f"pod {name}: container {container.get('name')} cannot start: {waiting.get('message', why)}",
            )
        if why == "CrashLoopBackOff":
            ended = last_termination(container)
            return Problem(
                "CrashLoopBackOff",
                f"pod {name}: container {container.get('name')} keeps crashing" + (f"; last {ended}" if ended else ""),
            )
    return None


def diagnose(
    source: str,
    pods: Iterable[Mapping[str, Any]],
    kind: str = DEFAULT_KIND,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
) -> Problem | None:
    """The first problem found: the model first (no pod can fix it), then pods in name order; a pod's problem
    names the engine kind when it is not Shoal's (its image or server is what failed)."""
    problem = check_model(source)
    if problem is not None:
        return problem
    for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", "")):
        problem = diagnose_pod(pod, gpu_resource)
        if problem is not None:
            return (
                problem if kind == DEFAULT_KIND else Problem(problem.reason, f"engine.kind {kind}: {problem.message}")
            )
    return None
