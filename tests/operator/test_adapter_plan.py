"""The run-time adapter sync's law (:mod:`shoal.operator.adapter_plan`): load what the spec has and the engine
lacks, unload what the engine has and the spec dropped, and nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shoal.operator.adapter_plan import Plan, after, plan, served_adapters

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
