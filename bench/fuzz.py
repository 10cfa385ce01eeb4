"""Fuzzing at length: schemathesis' generated requests (valid and invalid, from the OpenAPI document each server
serves at ``/openapi.json``) against a real ``shoal serve`` and ``shoal gateway`` in front of it, ``--examples``
per operation and mode; exits 1 listing every 5xx, transport failure, hang, or answer the document does not
describe (status, content type, JSON schema). The CI smoke is 15 per operation
(``tests/reliability/test_hostile_inputs.py``).

    .venv/bin/python bench/fuzz.py --examples 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests"), str(ROOT / "tests" / "engine")]

from gateway_fleet import start_engines, start_gateway  # noqa: E402
from support.fuzzing import fuzz  # noqa: E402
from tiny_checkpoints import build_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="per operation and generation mode")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_checkpoint(Path(tmp) / "model", "llama", seed=3, max_position_embeddings=2048)
        (engine,) = start_engines(str(model), 1, "tiny", Path(tmp), "--max-model-len", "512", "--request-timeout", "10")
        gateway = start_gateway([engine.url], Path(tmp), "--tokenizer", f"tiny={model}", "--request-timeout", "15")
        try:
            for name, url in (("engine", engine.url), ("gateway", gateway.url)):
                started = time.monotonic()
                found = fuzz(url, args.examples, "tiny", seed_value=args.seed)
                report[name] = {
                    "seconds": round(time.monotonic() - started, 1),
                    "requests": found.answers.total(),
                    "answers": dict(sorted(found.answers.items())),
                    "failures": found.failures,
                }
        finally:
            gateway.stop()
            engine.stop()
    print(json.dumps(report, indent=2))
    raise SystemExit(1 if any(r["failures"] for r in report.values()) else 0)


if __name__ == "__main__":
    main()
