"""Per adapter, on how many engine pods it is loaded; and ``AdaptersReady``, naming the adapter that fails.

The law: every engine loads all its adapters before it is ready (Shoal's engine before ``/ready`` answers, vLLM
before its port opens), and a pod's ``shoal.dev/adapters`` annotation names those its command line loads. So an
adapter is loaded on a pod that is Ready, not terminating, and names it; of M the engine pods not terminating
(``loaded on N of M``). A pod's ``fetch-adapter-<i>`` init container that failed (now or on its last try) is
``FetchFailed`` for the i-th name of its annotation, with the store's answer; an engine container that exited
non-zero with a message naming ``adapter 'NAME'`` (the engine's words when it refuses one; its log's tail, by
``FallbackToLogsOnError``) is ``LoadFailed`` with that line. Otherwise the condition is True (``Loaded``) once
every adapter is loaded on every ready pod and one pod at least is ready, else False (``Loading``).

Kind shoal loads at run time (:mod:`.adapter_sync`), so there the pods' own ``/v1/models`` say what each serves:
an adapter is loaded on a Ready, not-terminating pod whose last sync listed it (or loaded it), and one an engine
refused (its 4xx) makes the condition False, ``LoadFailed``, with the adapter, the pod and the engine's words; the
count of ``Loaded`` and ``Loading`` is the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shoal.operator.adapter_plan import PodAdapters
from shoal.operator.builders.adapters import ANNOTATION, FETCH_PREFIX
from shoal.operator.builders.engine import COMPONENT as ENGINE_CONTAINER
from shoal.operator.model_ready import fetch_state
from shoal.operator.spec import AdapterStatus

Verdict = tuple[bool, str, str]
Pod = Mapping[str, Any]


def _names(pod: Pod) -> list[str]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION, "")
    return text.split(",") if text else []


def _live(pod: Pod) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


def _ready(pod: Pod) -> bool:
    conditions = (pod.get("status") or {}).get("conditions", [])
    return _live(pod) and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def loaded(
    names: Sequence[str], pods: Sequence[Pod], observed: Mapping[str, PodAdapters] | None = None
) -> list[AdapterStatus]:
    """Each adapter of the spec (``names``) with the pods it is loaded on, of the live engine pods: as their
    annotation says, or with ``observed`` (kind shoal, pod name -> its last sync) as the engines said."""
    live = [p for p in pods if _live(p)]
    if observed is None:
        ready = [set(_names(p)) for p in live if _ready(p)]
    else:
        ready = [set(observed[n].loaded) for p in live if _ready(p) and (n := _pod_name(p)) in observed]
    return [AdapterStatus(name=n, loaded_replicas=sum(n in r for r in ready), replicas=len(live)) for n in names]


def _pod_name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def _fetch_failure(pod: Pod) -> str | None:
    names = _names(pod)
    for status in (pod.get("status") or {}).get("initContainerStatuses", []):
        container = str(status.get("name", ""))
        index = container.removeprefix(FETCH_PREFIX)
        if container.startswith(FETCH_PREFIX) and index.isdigit() and int(index) < len(names):
            state, record = fetch_state(pod, container)
            if state == "failed":
                return f"adapter '{names[int(index)]}': pod {_pod_name(pod)}: fetch failed: {record.get('error', '?')}"
    return None


def _load_failure(pod: Pod) -> str | None:
    statuses = (pod.get("status") or {}).get("containerStatuses", [])
    engine: Mapping[str, Any] = next((s for s in statuses if s.get("name") == ENGINE_CONTAINER), {})
    for terminated in (
        (engine.get("state") or {}).get("terminated"),
        (engine.get("lastState") or {}).get("terminated"),
    ):
        if not terminated or terminated.get("exitCode") == 0:
            continue
        lines = str(terminated.get("message") or "").splitlines()
        for name in _names(pod):
            line = next((line for line in reversed(lines) if f"adapter '{name}'" in line), None)
            if line is not None:
                return f"adapter '{name}': pod {_pod_name(pod)}: {line.strip()}"
    return None


def _refusal(statuses: Sequence[AdapterStatus], observed: Mapping[str, PodAdapters]) -> str | None:
    """The first spec adapter an engine refused at run time, with the pod and the engine's words."""
    for status in statuses:
        for pod, seen in sorted(observed.items()):
            if status.name in seen.refused:
                return f"adapter '{status.name}': pod {pod}: {seen.refused[status.name]}"
    return None


def adapters_ready(
    statuses: Sequence[AdapterStatus], pods: Sequence[Pod], observed: Mapping[str, PodAdapters] | None = None
) -> Verdict:
    """The ``AdaptersReady`` verdict (see the module's law); ``observed`` as for :func:`loaded`."""
    if observed is not None:
        refused = _refusal(statuses, observed)
        if refused is not None:
            return False, "LoadFailed", refused
    for reason, failure in (("FetchFailed", _fetch_failure), ("LoadFailed", _load_failure)):
        found = next((text for p in pods if _live(p) and (text := failure(p)) is not None), None)
        if found is not None:
            return False, reason, found
    ready = sum(_ready(p) for p in pods)
    behind = [s for s in statuses if s.loaded_replicas < ready]
    if ready and not behind:
        return True, "Loaded", f"{len(statuses)} adapters loaded on each of {ready} ready engine pods"
    if not ready:
        return False, "Loading", "no engine pod is ready yet"
    first = behind[0]
    return False, "Loading", f"adapter '{first.name}' loaded on {first.loaded_replicas} of {ready} ready engine pods"
