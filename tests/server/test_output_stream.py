"""The per-request buffer never blocks its writer, stays bounded, and loses nothing when it coalesces."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.engine.core.outputs import RequestMetrics
from shoal.engine.server.output_stream import Delta, RequestStream


def delta(index: int, n: int, finished: bool) -> Delta:
    return Delta(
        index=index,
        token_ids=[n],
        text=f"<{index}:{n}>",
        logprobs=None,
        finished=finished,
        finish_reason="length" if finished else None,
        stop_reason=None,
        num_prompt_tokens=3,
        num_cached_tokens=0,
        num_output_tokens=n + 1,
        metrics=RequestMetrics(arrival_time=0.0),
    )


@settings(max_examples=60, deadline=None)
@given(
    choices=st.integers(1, 4),
    capacity=st.integers(1, 8),
    lengths=st.lists(st.integers(1, 30), min_size=4, max_size=4),
    reads=st.lists(st.integers(1, 40), min_size=1, max_size=20),
)
def test_coalescing_keeps_every_token_in_order(
    choices: int, capacity: int, lengths: list[int], reads: list[int]
) -> None:
    """A reader that only looks now and then (after ``reads[i]`` writes) still gets each choice's tokens in order."""

    async def run() -> None:
        stream = RequestStream(num_choices=choices, capacity=capacity)
        writes = [
            delta(i, n, n == lengths[i] - 1) for n in range(max(lengths)) for i in range(choices) if n < lengths[i]
        ]
        got: dict[int, list[int]] = {i: [] for i in range(choices)}
        texts: dict[int, str] = {i: "" for i in range(choices)}
        schedule = iter(reads * (len(writes) + 1))
        pending_writes = list(writes)
        while pending_writes:
            for _ in range(next(schedule)):
                if pending_writes:
                    stream.put(pending_writes.pop(0))
            assert stream.pending() <= capacity + choices
            if stream.pending():
                for d in await stream.get():
                    got[d.index] += d.token_ids
                    texts[d.index] += d.text
        while stream.pending():
            for d in await stream.get():
                got[d.index] += d.token_ids
                texts[d.index] += d.text
        assert stream.finished
        for i in range(choices):
            assert got[i] == list(range(lengths[i]))
            assert texts[i] == "".join(f"<{i}:{n}>" for n in range(lengths[i]))

    asyncio.run(run())


def test_reader_wakes_when_a_delta_arrives_from_another_thread() -> None:
    async def run() -> list[int]:
        loop = asyncio.get_running_loop()
        stream = RequestStream(num_choices=1)
        loop.call_later(0.01, stream.put, delta(0, 0, True))
        return [t for d in await asyncio.wait_for(stream.get(), 5) for t in d.token_ids]

    assert asyncio.run(run()) == [0]


def test_a_failed_engine_surfaces_to_the_reader_after_what_it_already_sent() -> None:
    from shoal.engine.server.output_stream import StreamFailed

    async def run() -> None:
        stream = RequestStream(num_choices=1)
        stream.put(delta(0, 0, False))
        stream.fail(RuntimeError("step failed"))
        assert [d.token_ids for d in await stream.get()] == [[0]]
        assert not stream.finished
        try:
            await stream.get()
        except StreamFailed:
            return
        raise AssertionError("the failure was swallowed")

    asyncio.run(run())
