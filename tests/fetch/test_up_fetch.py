"""``shoal up`` fetches a manifest's ``hf://`` source once, before any engine starts, and stops with the Hub's
answer (exit 1) when it cannot."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr
from pathlib import Path
from unittest import mock

from fetch_harness import hub_env
from hub_standin import HubServer

from shoal.cli import main
from shoal.local.process import free_port

sys.path.insert(0, str(Path(__file__).parent.parent / "local"))
from up_harness import manifest, write_manifest


def test_up_stops_before_starting_anything_when_the_source_cannot_be_fetched(hub: HubServer, tmp_path: Path) -> None:
    file = write_manifest(tmp_path, manifest("hf://org/absent"))
    env = hub_env(hub) | {"SHOAL_MODEL_CACHE": str(tmp_path / "cache")}
    stderr = io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), redirect_stderr(stderr):
        status = main(["up", str(file), "--port", str(free_port()), "--no-tui", "--log-dir", str(tmp_path / "logs")])
    assert status == 1
    assert stderr.getvalue().startswith("shoal up: spec.model.source: hf://org/absent: 401 from the Hub")
    assert not (tmp_path / "logs").exists()  # no engine, no gateway
