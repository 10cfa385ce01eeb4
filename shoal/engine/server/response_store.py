"""The engine's store of finished responses, so that a request may continue one by ``previous_response_id``.

What is kept of a response is the conversation a follow-up continues, as chat templates receive it: the earlier
conversation it continued (if any), its input messages (function calls and their outputs as chat's assistant
``tool_calls`` and ``tool`` messages) and its answer as an assistant message with the calls it made (its
``instructions`` are not carried over, as in OpenAI's API). The store is bounded three ways, each evicting the least recently used first: ``max_entries``
responses, ``max_bytes`` of message text, and ``ttl_s`` seconds since a response was stored. It is in memory:
an engine restart forgets everything, and another replica never knew it (the gateway routes a follow-up to the
replica that answered; ``docs/api.md``). Used only on the event loop, so it needs no lock.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Messages = list[dict[str, Any]]
MAX_ENTRIES = 1024
MAX_BYTES = 64 * 1024 * 1024
TTL_S = 3600.0


@dataclass(frozen=True)
class _Stored:
    messages: Messages
    size: int
    expires_at: float


def _size(messages: Messages) -> int:
    """The bytes of the text the messages hold (a message's calls counted as their JSON)."""
    return sum(len((v if isinstance(v, str) else json.dumps(v)).encode()) for m in messages for v in m.values())


class ResponseStore:
    """Conversations by response id, least recently used first."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries, self.max_bytes, self.ttl_s = max_entries, max_bytes, ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, _Stored] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, messages: Messages) -> None:
        """Keeps ``messages`` under ``response_id``; one larger than the whole store is not kept."""
        self._drop(response_id)
        size = _size(messages)
        if size > self.max_bytes:
            return
        self._entries[response_id] = _Stored(list(messages), size, self._clock() + self.ttl_s)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def get(self, response_id: str) -> Messages | None:
        """The conversation stored under ``response_id``, or ``None`` if it never was, expired or was evicted."""
        stored = self._entries.get(response_id)
        if stored is None:
            return None
        if self._clock() >= stored.expires_at:
            self._drop(response_id)
            return None
        self._entries.move_to_end(response_id)
        return list(stored.messages)

    def _drop(self, response_id: str) -> None:
        stored = self._entries.pop(response_id, None)
        if stored is not None:
            self._bytes -= stored.size
