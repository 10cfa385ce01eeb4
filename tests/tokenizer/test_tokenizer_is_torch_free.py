"""The gateway tokenizes too and must never pull in torch: the tokenizer and registry import without it."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(60)
def test_tokenizer_and_registry_import_without_torch() -> None:
    code = (
        "import sys, shoal.tokenizer, shoal.model_registry\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'shoal.engine', 'shoal.kernels') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
