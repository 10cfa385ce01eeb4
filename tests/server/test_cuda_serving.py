"""A request served on a CUDA GPU: the real ``shoal serve`` process, ``--device cuda``, the official client.

Part of the GPU lane (``make test-gpu``); skipped, with the reason, on a machine without a GPU. In float32 (the
Triton kernels' fp32 dots are IEEE, not TF32) its greedy text equals the shared CPU server's, token for token.
"""

from __future__ import annotations

import re
from pathlib import Path

import openai
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess
from support.devices import GPU_DEVICE, needs_gpu

pytestmark = [*needs_gpu, pytest.mark.timeout(300)]

PROMPT = "Once upon a time"


def _greedy(client: openai.OpenAI) -> tuple[str, int]:
    out = client.completions.create(
        model=TINY_MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
    )
    return out.choices[0].text, out.usage.completion_tokens


def test_a_completion_served_on_cuda_equals_the_cpu_servers(
    tmp_path: Path, tiny_model_dir: Path, client: openai.OpenAI
) -> None:
    server = ServeProcess(tiny_model_dir, tmp_path / "serve.log", "--dtype", "float32", device=GPU_DEVICE)
    try:
        server.wait_ready()
        on_gpu = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)
        text, tokens = _greedy(on_gpu)
        assert re.search(r"device cuda \(", server.log(chars=100_000)), server.log()
    finally:
        server.stop()

    assert tokens == 16
    assert (text, tokens) == _greedy(client)
