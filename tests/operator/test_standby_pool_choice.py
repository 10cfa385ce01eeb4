"""Which engine pods serve and which wait in the standby pool: the pure choice the reconciler applies each pass."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from shoal.operator.standby_pool import (
    POOL_LABEL,
    SERVING,
    STANDBY,
    EnginePod,
    assign,
    engine_pod,
    label_patches,
    pool_count,
    serving_at,
    serving_views,
)


def pod(name: str, pool: str | None = SERVING, ready: bool = True, **kw: object) -> EnginePod:
    return EnginePod(name, pool, ready, created=f"2026-01-01T00:00:0{name[-1]}Z", **kw)  # type: ignore[arg-type]


def test_a_scale_up_promotes_the_ready_pool_pod_and_demotes_the_new_one() -> None:
    a, b = pod("a1"), pod("b2", STANDBY)
    new = pod("c3", SERVING, ready=False)  # the ReplicaSet's new pod serves by its template
    assert label_patches([a, b], desired=2, standby=1) == {"b2": SERVING}  # before the new pod exists
    assert label_patches([a, replace(b, pool=SERVING), new], desired=2, standby=1) == {"c3": STANDBY}


def test_a_scale_in_that_removed_a_pool_pod_demotes_the_newest_serving_pod() -> None:
    assert label_patches([pod("a1"), pod("b2")], desired=1, standby=1) == {"b2": STANDBY}


def test_surplus_pods_of_a_scale_in_not_yet_carried_out_keep_serving() -> None:
    pods = [pod("a1"), pod("b2"), pod("c3", STANDBY)]
    assert label_patches(pods, desired=1, standby=1) == {}  # 3 pods, 2 wanted: the ReplicaSet deletes one first


def test_unlabelled_pods_serve_and_get_the_label() -> None:
    assert label_patches([pod("a1", None), pod("b2", None, ready=False)], desired=2, standby=1) == {
        "a1": SERVING,
        "b2": SERVING,
    }


def test_without_a_pool_every_pod_serves_and_terminating_ones_are_left_alone() -> None:
    pods = [pod("a1", STANDBY), pod("b2", STANDBY, terminating=True)]
    assert label_patches(pods, desired=0, standby=0) == {"a1": SERVING}


def test_the_watch_view_reads_labels_readiness_and_deletion() -> None:
    view = {
        "metadata": {
            "name": "e-1",
            "labels": {POOL_LABEL: STANDBY},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": None,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert engine_pod(view) == EnginePod("e-1", STANDBY, True, False, "2026-01-01T00:00:00Z")
    assert engine_pod({"metadata": {"name": "e-2", "labels": {POOL_LABEL: "odd"}}}).pool is None
    assert serving_views([view], {}) == [] and serving_views([view], {"e-1": SERVING}) == [view]
    assert pool_count([view], {}).ready == 1 and pool_count([view], {"e-1": SERVING}).pods == 0


def test_the_policy_sees_the_pods_serving_at_its_count_never_the_pool() -> None:
    def view(name: str, pool: str, ready: bool) -> dict[str, object]:
        condition = {"type": "Ready", "status": str(ready)}
        created = f"2026-01-01T00:00:0{name[-1]}Z"
        return {"metadata": {"name": name, "labels": {POOL_LABEL: pool}, "creationTimestamp": created},
                "status": {"conditions": [condition]}}  # fmt: skip

    # just scaled up to 2: the pool pod is promoted, the ReplicaSet's new pod (serving by template) is not counted
    views = [view("a1", SERVING, True), view("b2", STANDBY, True), view("c3", SERVING, False)]
    assert [v["metadata"]["name"] for v in serving_at(views, 2, 1)] == ["a1", "b2"]  # type: ignore[index]
    # a new fleet: both pods serve by template until the pass that makes one the pool
    assert [v["metadata"]["name"] for v in serving_at([views[0], views[2]], 1, 1)] == ["a1"]  # type: ignore[index]


def _rank(p: EnginePod) -> int:
    return (0 if p.ready else 2) + (p.pool == STANDBY)


pods_strategy = st.lists(
    st.builds(
        EnginePod,
        name=st.just(""),
        pool=st.sampled_from([SERVING, STANDBY, None]),
        ready=st.booleans(),
        terminating=st.booleans(),
        created=st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"]),
    ),
    max_size=9,
).map(lambda ps: [replace(p, name=f"e-{i}") for i, p in enumerate(ps)])


@given(pods_strategy, st.integers(0, 6), st.integers(0, 4))
def test_the_choice_keeps_the_law(pods: list[EnginePod], desired: int, standby: int) -> None:
    wanted = assign(pods, desired, standby)
    live = [p for p in pods if not p.terminating]
    assert set(wanted) == {p.name for p in live}  # every live pod placed, terminating ones untouched
    serving = [p for p in live if wanted[p.name] == SERVING]
    pooled = [p for p in live if wanted[p.name] == STANDBY]
    assert len(pooled) == min(standby, max(0, len(live) - desired))  # the pool never beyond standby
    assert len(serving) >= min(desired, len(live))  # never fewer serving than wanted while pods exist
    assert all(_rank(s) <= _rank(p) for s in serving for p in pooled)  # ready before loading, serving before pool
    patches = label_patches(pods, desired, standby)
    assert all(p.pool != wanted[p.name] for p in live if p.name in patches)  # only real moves
    moved = [replace(p, pool=patches.get(p.name, p.pool)) for p in pods]
    assert label_patches(moved, desired, standby) == {}  # a pass after the moves moves nothing
