"""``status.adapters`` (loaded on N of M engine pods) and ``AdaptersReady`` from the engine pods as the operator's
index holds them (metadata with the ``shoal.dev/adapters`` annotation, and the kubelet's status)."""

from __future__ import annotations

import json
from typing import Any

from shoal.operator.adapter_plan import PodAdapters
from shoal.operator.adapters_ready import adapters_ready, loaded

NAMES = ["sql", "chat"]


def pod(
    name: str,
    *,
    ready: bool = False,
    adapters: str = "sql,chat",
    deleting: bool = False,
    fetch: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if fetch is not None:
        status["initContainerStatuses"] = [{"name": "fetch-adapter-1", **fetch}]
    if engine is not None:
        status["containerStatuses"] = [{"name": "engine", **engine}]
    meta: dict[str, Any] = {"name": name, "annotations": {"shoal.dev/adapters": adapters}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


def counts(pods: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    return {s.name: (s.loaded_replicas, s.replicas) for s in loaded(NAMES, pods)}


def test_an_adapter_is_loaded_on_the_ready_pods_whose_command_line_names_it() -> None:
    pods = [
        pod("a", ready=True),
        pod("b", ready=True, adapters="sql"),  # from the template before chat was added
        pod("c"),
        pod("d", ready=True, deleting=True),
    ]
    assert counts(pods) == {"sql": (2, 3), "chat": (1, 3)}
    assert adapters_ready(loaded(NAMES, pods), pods) == (
        False,
        "Loading",
        "adapter 'chat' loaded on 1 of 2 ready engine pods",
    )


def test_every_adapter_on_every_ready_pod_is_loaded() -> None:
    pods = [pod("a", ready=True), pod("b")]
    assert adapters_ready(loaded(NAMES, pods), pods) == (
        True,
        "Loaded",
        "2 adapters loaded on each of 1 ready engine pods",
    )
    assert adapters_ready(loaded(NAMES, []), [])[:2] == (False, "Loading")


def test_a_failed_fetch_names_the_adapter_and_quotes_the_store() -> None:
    record = {"source": "s3://adapters/chat/", "error": "s3://adapters/chat/: 403 Forbidden"}
    failed = {"lastState": {"terminated": {"exitCode": 1, "message": json.dumps(record)}}, "state": {"waiting": {}}}
    pods = [pod("a", ready=True), pod("b", fetch=failed)]
    assert adapters_ready(loaded(NAMES, pods), pods) == (
        False,
        "FetchFailed",
        "adapter 'chat': pod b: fetch failed: s3://adapters/chat/: 403 Forbidden",
    )


def test_an_adapter_the_engine_refuses_is_named_with_the_engines_words() -> None:
    # the tail of a real `shoal serve --lora-modules sql=/model-link/adapter-0` log whose link leads nowhere
    log = (
        "shoal.engine.lora.adapter.LoRAError: adapter 'sql': no adapter_config.json in '/model-link/adapter-0'\n"
        "2026-11-27 08:44:17,574 INFO uvicorn.error [-] Shutting down\n"
        "2026-11-27 08:44:17,676 INFO uvicorn.error [-] Finished server process [16792]\n"
    )
    crashed = {"lastState": {"terminated": {"exitCode": 1, "message": log}}, "state": {"waiting": {}}}
    pods = [pod("a", engine=crashed)]
    assert adapters_ready(loaded(NAMES, pods), pods) == (
        False,
        "LoadFailed",
        "adapter 'sql': pod a: shoal.engine.lora.adapter.LoRAError: adapter 'sql': no adapter_config.json in "
        "'/model-link/adapter-0'",
    )
    clean_exit = {"state": {"terminated": {"exitCode": 0, "message": log}}}
    assert adapters_ready(loaded(NAMES, [pod("a", engine=clean_exit)]), [pod("a", engine=clean_exit)])[1] == "Loading"


def test_at_run_time_what_the_engines_said_counts_and_a_refusal_names_the_adapter_and_why() -> None:
    """Kind shoal: the pods' own ``/v1/models`` (their last sync), not an annotation; a refused adapter makes the
    condition False naming it while the others count as loaded."""
    pods = [pod("a", ready=True, adapters=""), pod("b", ready=True, adapters=""), pod("c", adapters="")]
    observed = {
        "a": PodAdapters(loaded=frozenset({"sql", "chat"})),
        "b": PodAdapters(loaded=frozenset({"sql"}), refused={"chat": "adapter 'chat' has rank 64, more than 16"}),
        "c": PodAdapters(loaded=frozenset({"sql", "chat"})),  # not ready: not counted
    }
    statuses = loaded(NAMES, pods, observed)
    assert {s.name: (s.loaded_replicas, s.replicas) for s in statuses} == {"sql": (2, 3), "chat": (1, 3)}
    assert adapters_ready(statuses, pods, observed) == (
        False,
        "LoadFailed",
        "adapter 'chat': pod b: adapter 'chat' has rank 64, more than 16",
    )
    observed["b"] = PodAdapters(loaded=frozenset({"sql", "chat"}))
    assert adapters_ready(loaded(NAMES, pods, observed), pods, observed)[:2] == (True, "Loaded")
    unasked = {"a": observed["a"], "b": PodAdapters(error="GET http://10.0.0.2:8000/v1/models: timed out")}
    assert adapters_ready(loaded(NAMES, pods, unasked), pods, unasked) == (
        False,
        "Loading",
        "adapter 'sql' loaded on 1 of 2 ready engine pods",
    )
