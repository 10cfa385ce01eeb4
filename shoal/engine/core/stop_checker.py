"""Decides whether a request is done after a new token, and which part of its text may be shown yet.

Stop strings are searched in the detokenized text, so they are found across token boundaries; the text is
cut before the stop string (vLLM's default). While a request runs, the last ``len(longest stop) - 1``
characters are held back, since they could still turn out to begin a stop string.
"""

from __future__ import annotations

from shoal.engine.core.request import Request, RequestStatus


class TextState:
    """The detokenized output of one request that was not handed out yet: only that is kept, so a long output is
    never copied whole per token, and a stop string is searched where it could have completed."""

    def __init__(self, stop: list[str]) -> None:
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1
        self.unsent = ""  # while the request runs, at least the last ``holdback`` characters of its text

    def append(self, new_text: str, check_stop: bool = True) -> str | None:
        """Adds text; returns the stop string if one now appears (the text is cut before it)."""
        start = max(len(self.unsent) - self.holdback, 0)
        self.unsent += new_text
        if not check_stop or not self.stop:
            return None
        best: tuple[int, str] | None = None
        for stop in self.stop:
            index = self.unsent.find(stop, start)
            if index >= 0 and (best is None or index < best[0]):
                best = (index, stop)
        if best is None:
            return None
        self.unsent = self.unsent[: best[0]]
        return best[1]

    def take(self, finished: bool) -> str:
        """The text not handed out yet, minus the held-back tail while the request runs."""
        end = len(self.unsent) if finished else len(self.unsent) - self.holdback
        if end <= 0:
            return ""
        out, self.unsent = self.unsent[:end], self.unsent[end:]
        return out


def token_stop(
    request: Request, token_id: int, eos_token_ids: frozenset[int]
) -> tuple[RequestStatus, int | None] | None:
    """The finish status (and the stop token, if one) a just-sampled token causes, before any text check."""
    params = request.params
    num_output_tokens = request.num_output_tokens
    if num_output_tokens >= params.min_tokens:
        if token_id in params.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED, token_id
        if not params.ignore_eos and token_id in eos_token_ids:
            return RequestStatus.FINISHED_STOPPED, None
    if num_output_tokens >= request.max_output_tokens:
        return RequestStatus.FINISHED_LENGTH, None
    return None
