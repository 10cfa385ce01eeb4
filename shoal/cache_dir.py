"""Where Shoal keeps what it builds or converts on this machine: ``$SHOAL_CACHE``, else ``~/.cache/shoal``."""

from __future__ import annotations

import os
from pathlib import Path


def shoal_cache() -> Path:
    """The cache root every local cache (C kernels, converted weights) lives under."""
    return Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")
