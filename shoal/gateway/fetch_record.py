"""A tokenizer fetched for the gateway, found through the record its fetch left.

On a cluster the gateway pod's init container runs ``shoal fetch-model SOURCE --tokenizer-only
--termination-message-path FILE``: the tokenizer lands in a cache directory keyed by source and revision, and
``FILE`` gets one JSON line, ``{"source": ..., "path": ..., "bytes": N, "cached": bool}`` (or ``{"source": ...,
"error": ...}``). ``shoal gateway --fetch-record MODEL=FILE`` reads that line, so the gateway loads the tokenizer
from ``path`` without knowing the cache's layout. A record that is missing or holds an error stops the gateway
with the record's own words: the init container that wrote it should already have failed the pod.
"""

from __future__ import annotations

import json
from pathlib import Path


def fetched_tokenizers(pairs: list[str]) -> dict[str, str]:
    """``MODEL=FILE`` pairs -> {model: the local path its record names}."""
    out: dict[str, str] = {}
    for pair in pairs:
        model, sep, file = pair.partition("=")
        if not sep or not model or not file:
            raise SystemExit(f"--fetch-record expects MODEL=FILE, got {pair!r}")
        out[model] = _recorded_path(Path(file))
    return out


def _recorded_path(file: Path) -> str:
    try:
        record = json.loads(file.read_text().strip().splitlines()[-1])
    except OSError as exc:
        raise SystemExit(f"--fetch-record {file}: cannot read: {exc.strerror or exc}") from exc
    except (IndexError, json.JSONDecodeError) as exc:
        raise SystemExit(f"--fetch-record {file}: not a shoal fetch-model record (one JSON line): {exc}") from exc
    if not isinstance(record, dict):
        raise SystemExit(f"--fetch-record {file}: not a shoal fetch-model record (a JSON object)")
    if "error" in record:
        raise SystemExit(f"--fetch-record {file}: fetching {record.get('source', '?')} failed: {record['error']}")
    path = record.get("path")
    if not isinstance(path, str) or not path:
        raise SystemExit(f"--fetch-record {file}: the record names no path (keys: {', '.join(sorted(record))})")
    return path
