"""``ModelReady``: whether the engine pods have the model, read from their ``fetch-model`` init containers.

The law: a source read where it is (an alias, a path, pvc://) is ready as it is (``LocalSource``). A fetched one
(hf://, s3://) is judged per engine pod from its ``fetch-model`` init container: failed if it exited non-zero,
now or on its last try (the kubelet retries it, so a 401 shows as a terminated last state under a back-off);
fetched if it exited 0; fetching otherwise. Any failing pod makes the condition False (``FetchFailed``, with the
store's answer: the ``error`` of the fetcher's one-line JSON termination message, else the message as the
kubelet kept it); else any fetched pod makes it True (``Fetched``, with the bytes the records report); else it
is False (``Fetching``, or ``NoEnginePods`` while none exists).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from shoal.operator import model_source
from shoal.operator.builders.model import FETCH_CONTAINER

Verdict = tuple[bool, str, str]


def _record(terminated: Mapping[str, Any]) -> dict[str, Any]:
    """The fetcher's JSON line from a termination message, or ``{"error": <the raw message>}``."""
    message = str(terminated.get("message") or "").strip()
    last = message.splitlines()[-1] if message else ""
    try:
        record = json.loads(last)
    except json.JSONDecodeError:
        record = None
    if isinstance(record, dict):
        return record
    return {"error": message or f"exit code {terminated.get('exitCode')} ({terminated.get('reason', 'Error')})"}


def fetch_state(pod: Mapping[str, Any], container: str = FETCH_CONTAINER) -> tuple[str, dict[str, Any]]:
    """One pod's fetch by its ``container`` (the model's fetcher unless named): ("failed" | "fetched" |
    "fetching", the fetcher's record where one was written)."""
    status: Mapping[str, Any] = next(
        (s for s in (pod.get("status") or {}).get("initContainerStatuses", []) if s.get("name") == container),
        {},
    )
    now = (status.get("state") or {}).get("terminated")
    last = (status.get("lastState") or {}).get("terminated")
    if now is not None and now.get("exitCode") == 0:
        return "fetched", _record(now)
    for terminated in (now, last):
        if terminated is not None and terminated.get("exitCode") != 0:
            return "failed", _record(terminated)
    return "fetching", {}


def fetch_failure(pod: Mapping[str, Any]) -> str | None:
    """The store's answer if this pod's fetch failed (for the Degraded condition), else None."""
    state, record = fetch_state(pod)
    return str(record.get("error", "?")) if state == "failed" else None


def _bytes(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{n} bytes" if unit == "B" else f"{size:.1f} {unit} ({n} bytes)"


def model_ready(source: str, pods: Iterable[Mapping[str, Any]]) -> Verdict:
    """The ``ModelReady`` verdict for ``source`` from the engine pods (see the module's law)."""
    if model_source.kind(source) not in model_source.FETCHED_KINDS:
        return True, "LocalSource", f"{source} is read where it is: nothing to fetch"
    states = {
        pod.get("metadata", {}).get("name", "?"): fetch_state(pod)
        for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", ""))
    }
    if not states:
        return False, "NoEnginePods", f"no engine pod runs to fetch {source}"
    failed = [(name, record) for name, (state, record) in states.items() if state == "failed"]
    if failed:
        name, record = failed[0]
        return False, "FetchFailed", f"pod {name}: fetching {source} failed: {record.get('error', '?')}"
    done = [record for state, record in states.values() if state == "fetched"]
    if not done:
        return False, "Fetching", f"{len(states)} engine pods fetching {source}"
    size = max((r["bytes"] for r in done if isinstance(r.get("bytes"), int)), default=None)
    cached = sum(1 for r in done if r.get("cached") is True)
    how = f"{len(done) - cached} downloaded it, {cached} found it cached"
    what = f"{source}: {_bytes(size)}" if size is not None else source
    return True, "Fetched", f"{what} in {len(done)} of {len(states)} engine pods ({how})"
