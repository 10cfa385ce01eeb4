"""The engine's HTTP server: OpenAI-compatible API, step thread, metrics and KV events."""

from shoal.engine.server.app import ServerSettings, build_app
from shoal.engine.server.async_engine import AsyncEngine, Child, Generation

__all__ = ["AsyncEngine", "Child", "Generation", "ServerSettings", "build_app"]
