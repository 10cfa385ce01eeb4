"""The device the test suite's engines run on, named once, so a GPU host runs the same suite as a CPU one.

Engines started by the tests (``LLM(...)``, ``EngineConfig(...)``, the ``shoal serve`` harnesses) pass
``--device`` explicitly: left to ``auto``, a GPU host would pick CUDA for tests written for, and timed on, the CPU.
A test that is about the GPU says so with ``needs_gpu`` (marker ``gpu``, run by ``make test-gpu``) and asks for
``GPU_DEVICE``; on a machine without one it is skipped with the reason.
"""

from __future__ import annotations

import pytest
import torch

TEST_DEVICE = "cpu"
GPU_DEVICE = "cuda"

needs_gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is false)"),
]
