"""A request's text against its stop strings: handed out as it comes, cut before the first stop string to
complete, never showing a character that could still begin one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.engine.core.stop_checker import TextState

ALPHABET = st.sampled_from("ab c\n")


@settings(max_examples=500, deadline=None)
@given(
    chunks=st.lists(st.text(ALPHABET, max_size=4), max_size=20),
    stop=st.lists(st.text(ALPHABET, min_size=1, max_size=4), max_size=3),
    unchecked=st.integers(0, 5),
)
def test_pieces_are_the_text_up_to_the_first_stop_string_to_complete(
    chunks: list[str], stop: list[str], unchecked: int
) -> None:
    """The model: after each chunk (the first ``unchecked`` under ``min_tokens``, not searched), the earliest
    stop string in the text from where the chunk could have completed one; the text ends before it."""
    state = TextState(stop)
    holdback = max((len(s) for s in stop), default=1) - 1
    text, shown, found = "", "", None
    for i, chunk in enumerate(chunks):
        start = max(len(text) - holdback, 0)
        text += chunk
        got = state.append(chunk, check_stop=i >= unchecked)
        if i >= unchecked:
            hits = [(text.find(s, start), n, s) for n, s in enumerate(stop) if text.find(s, start) >= 0]
            if hits:
                index, _, found = min(hits)
                text = text[:index]
        assert got == found
        shown += state.take(finished=found is not None)
        if found is not None:
            assert shown == text
            break
        assert shown == text[: max(len(text) - holdback, 0)]  # all but the tail that could begin a stop string
    else:
        shown += state.take(finished=True)
    assert shown == text
