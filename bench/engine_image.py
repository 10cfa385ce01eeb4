"""The engine image, built and served from here (too large for CI): `make image-engine`, then `shoal serve` run
from the image with `buildah run` answers a chat completion from the bundled SmolLM2 through the openai client.
Prints the build time and the sizes of both images (docs/install.md records them).

    .venv/bin/python bench/engine_image.py [--no-build]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from openai import OpenAI

from shoal.local.process import LocalProcess
from shoal.operator.spec import DEFAULT_ENGINE_IMAGE, DEFAULT_GATEWAY_IMAGE

REPO = Path(__file__).resolve().parents[1]
BUILDAH = ["buildah", "--storage-driver", "vfs"]


def buildah(*args: str) -> str:
    return subprocess.run([*BUILDAH, *args], capture_output=True, text=True, check=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build", action="store_true", help="use the engine image already built")
    args = parser.parse_args()
    if not args.no_build:
        started = time.monotonic()
        subprocess.run(
            ["bash", str(REPO / "hack" / "images" / "build.sh"), "engine"],
            check=True,
            cwd=REPO,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PY": sys.executable, "BUILDER": "buildah"},
        )
        print(f"build: {time.monotonic() - started:.0f} s")
    for image in (DEFAULT_GATEWAY_IMAGE, DEFAULT_ENGINE_IMAGE):
        print(f"size: {image} {buildah('images', '--format', '{{.Size}}', image).splitlines()[0]}")
    container = buildah("from", "--pull-never", DEFAULT_ENGINE_IMAGE).splitlines()[-1]
    try:
        print(f"user: {buildah('run', '--isolation', 'chroot', container, '--', 'id', '-u')}")
        with tempfile.TemporaryDirectory() as logs:
            argv = [
                *BUILDAH,
                "run",
                "--isolation",
                "chroot",
                container,
                "--",
                "shoal",
                "serve",
                "--model",
                "smollm2-135m",
                "--host",
                "127.0.0.1",
                "--dtype",
                "float32",
            ]
            engine = LocalProcess(argv, Path(logs) / "engine.log")
            try:
                started = time.monotonic()
                engine.wait_ready(timeout=900)
                print(f"ready: {time.monotonic() - started:.0f} s after start")
                reply = OpenAI(base_url=f"{engine.url}/v1", api_key="unused").chat.completions.create(
                    model="smollm2-135m",
                    max_tokens=16,
                    temperature=0,
                    messages=[{"role": "user", "content": "What is the capital of France?"}],
                )
                print(f"answer: {reply.choices[0].message.content!r}")
            finally:
                engine.stop()
    finally:
        buildah("rm", container)
    return 0


if __name__ == "__main__":
    sys.exit(main())
