"""The run-time adapter sync's law (:mod:`shoal.operator.adapter_plan`): load what the spec has and the engine
lacks, unload what the engine has and the spec dropped, and nothing else."""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from shoal.operator.adapter_plan import Plan, after, plan, served_adapters
from shoal.operator.adapter_sync import AdapterSync

NAMES = st.sampled_from(["sql", "chat", "legal", "support", "code"])


def test_the_engines_adapters_are_the_cards_whose_parent_is_the_served_model() -> None:
    cards = [
        {"id": "llama", "parent": None},
        {"id": "llama-alias"},
        {"id": "sql", "parent": "llama", "root": "/model-cache/sql"},
        {"id": "other", "parent": "another-model"},
    ]
    assert served_adapters(cards, "llama") == {"sql"}


def test_a_changed_list_loads_the_new_in_the_specs_order_and_unloads_the_dropped() -> None:
    wanted = [("legal", "/a/legal"), ("sql", "hf://acme/sql"), ("chat", "s3://b/chat/")]
    assert plan(wanted, frozenset({"sql", "old", "code"})) == Plan(
        load=(("legal", "/a/legal"), ("chat", "s3://b/chat/")), unload=("code", "old")
    )
    assert plan(wanted, frozenset({"legal", "sql", "chat"})) == Plan(load=(), unload=())


@given(wanted=st.lists(NAMES, unique=True), served=st.frozensets(NAMES), failed=st.frozensets(NAMES))
def test_the_plan_once_done_serves_exactly_the_spec_and_touches_nothing_else(
    wanted: list[str], served: frozenset[str], failed: frozenset[str]
) -> None:
    calls = plan([(name, f"/adapters/{name}") for name in wanted], served)
    loads = [name for name, _ in calls.load]
    assert after(served, loads, calls.unload) == set(wanted)
    assert not set(loads) & served and set(calls.unload) <= served, "no call for what is already right"
    assert [source for _, source in calls.load] == [f"/adapters/{name}" for name in loads]
    # a call that fails leaves that adapter as it was, and the next plan asks for it again
    done = after(served, [n for n in loads if n not in failed], [n for n in calls.unload if n not in failed])
    again = plan([(name, f"/adapters/{name}") for name in wanted], done)
    assert {n for n, _ in again.load} | set(again.unload) == (set(loads) | set(calls.unload)) & failed


async def test_an_alert_pass_reports_the_last_sync_and_asks_no_engine() -> None:
    """The engine is a stand-in (httpx's MockTransport answering ``/v1/models``): what is checked is when the sync
    calls it, not the engine (``test_adapters_runtime.py`` runs real ones)."""
    calls: list[str] = []

    def engine(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(200, json={"data": [{"id": "llama"}, {"id": "sql", "parent": "llama"}]})

    pod = {
        "metadata": {"name": "engine-0"},
        "status": {"podIP": "198.18.0.9", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    sync = AdapterSync(httpx.AsyncClient(transport=httpx.MockTransport(engine)))
    try:
        assert await sync.observe(("ns", "fleet"), [pod], [("sql", "/a/sql")], "llama", sync=False) == {}
        assert calls == []
        seen = await sync.observe(("ns", "fleet"), [pod], [("sql", "/a/sql")], "llama")
        assert seen["engine-0"].loaded == {"sql"} and calls == ["/v1/models"]
        again = await sync.observe(("ns", "fleet"), [pod], [("sql", "/a/sql")], "llama", sync=False)
        assert again == seen and calls == ["/v1/models"], "an alert's pass keeps what was seen, asks nothing"
    finally:
        await sync.close()
