"""The fetcher's errors: each message is one line a user can act on, and never carries a credential."""

from __future__ import annotations


class FetchError(Exception):
    """A fetch that failed; the message names the store's answer (credentials, no such thing, no space)."""


class SourceError(FetchError, ValueError):
    """The source text itself is wrong (bad syntax, an unsupported scheme)."""


class Unreachable(FetchError):
    """The store could not be reached at all (a cached copy may still be used)."""


class Retryable(FetchError):
    """A cut connection or a 5xx: the same request may succeed if tried again."""
