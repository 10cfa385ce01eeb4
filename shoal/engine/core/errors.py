"""Errors the engine reports to its callers (the offline API and the HTTP server)."""

from __future__ import annotations


class InvalidRequestError(ValueError):
    """A request the engine refuses; ``field`` names the offending parameter (the OpenAI ``param``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message
