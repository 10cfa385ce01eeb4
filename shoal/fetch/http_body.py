"""A streamed HTTP response as a :class:`~shoal.fetch.download.Body`: where it starts, and its chunks.

The chunks are yielded as they arrive (``iter_raw``), so the bytes received before a connection is cut are
written, and the next request resumes after them.
"""

from __future__ import annotations

import re

import httpx

from shoal.fetch.download import Body
from shoal.fetch.errors import FetchError, Retryable

_CONTENT_RANGE = re.compile(r"bytes (\d+)-")


def range_headers(offset: int) -> dict[str, str]:
    """Byte ranges of the stored bytes (no compression in between), from ``offset`` on."""
    return {"Accept-Encoding": "identity"} | ({"Range": f"bytes={offset}-"} if offset else {})


def body_of(response: httpx.Response, name: str) -> Body:
    """The body of a 200 (the whole file) or 206 (from its ``Content-Range`` start)."""
    if response.status_code == 200:
        return Body(0, response.iter_raw())
    if response.status_code == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if match is None:
            raise FetchError(f"{name}: a 206 answer without a Content-Range")
        return Body(int(match[1]), response.iter_raw())
    if response.status_code >= 500 or response.status_code == 429:
        raise Retryable(f"the store answered {response.status_code}")
    raise AssertionError("4xx answers are the store's to explain")
