"""Keys and tokens never appear in logs: every log record the test session emits and every ``*.log`` file it
leaves under its temporary directory (engines, gateways, the control plane, Redis, Prometheus) is checked for
an API key (``sk-...``, the form every test key takes) or a bearer token; ``tests/conftest.py`` fails the
session naming each place one was found."""

from __future__ import annotations

import logging
import re
from pathlib import Path

SECRET = re.compile(r"(?<![\w-])sk-[A-Za-z0-9_-]+|Bearer\s+[A-Za-z0-9._~+/=-]{6,}")


def secrets_in(text: str) -> list[str]:
    return SECRET.findall(text)


class SecretCatcher(logging.Handler):
    """A root handler noting every record whose message or traceback carries a secret."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage() + (self.formatException(record.exc_info) if record.exc_info else "")
        except Exception:  # noqa: BLE001 - a record that cannot be formatted carries nothing to scan
            return
        for secret in secrets_in(text):
            self.found.append(f"log record {record.name}: {secret[:12]}...")


def scan_log_files(root: Path) -> list[str]:
    """``path: secret`` for every secret in the ``*.log`` files under ``root``."""
    found = []
    for path in sorted(root.rglob("*.log")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        found += [f"{path}: {secret[:12]}..." for secret in secrets_in(text)]
    return found
