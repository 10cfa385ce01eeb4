"""Which replica answered each response, so that a follow-up (``previous_response_id``) is routed to the one engine
that stored it.

A Shoal engine names a response after the request id the gateway sent it (``responses_api.response_id``), so the
gateway knows the name without reading the answer. The map is bounded (``max_entries``, least recently used first, about
100 bytes an entry) and in memory: a follow-up it has forgotten, or that another gateway replica served, is routed
as any request, and the engine answers a 400 naming ``previous_response_id`` unless it happens to hold it.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_ENTRIES = 100_000


class ResponseHomes:
    """Response id -> the URL of the replica that holds it."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._homes: OrderedDict[str, str] = OrderedDict()

    def record(self, response: str, replica_url: str) -> None:
        self._homes[response] = replica_url
        self._homes.move_to_end(response)
        if len(self._homes) > self.max_entries:
            self._homes.popitem(last=False)

    def home(self, response: str) -> str | None:
        url = self._homes.get(response)
        if url is not None:
            self._homes.move_to_end(response)
        return url
