"""The engine's HTTP server (``shoal serve``): OpenAI-compatible API, step thread, metrics and KV events.

Nothing is imported here: the ``shoal`` command builds its parser from ``shoal.engine.server.cli`` and must not
pay for torch (or need it) when it runs ``shoal gateway`` or ``shoal operator``.
"""
