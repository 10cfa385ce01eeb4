"""The image tests build with hack/images/build.sh and inspect with buildah (helpers in image_harness)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `image_harness` under any pytest import mode
