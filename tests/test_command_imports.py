"""The operator/gateway image has no torch: the ``shoal`` command must build and dispatch without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

TORCH_FREE_COMMANDS = [
    ["gateway", "--help"],
    ["operator", "--help"],
    ["crd"],
    ["bench", "serve", "--help"],
    ["simulate", "--help"],
    ["fetch-model", "smollm2-135m", "--download-dir", "/nonexistent"],  # the gateway's init container runs it
]


@pytest.mark.parametrize("argv", TORCH_FREE_COMMANDS, ids=lambda a: " ".join(a))
def test_torch_free_commands_never_import_torch(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from shoal.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('torch', 'triton', 'transformers') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
