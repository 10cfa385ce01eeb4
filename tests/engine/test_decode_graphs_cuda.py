"""Real CUDA graphs, captured with the Triton kernels at start-up: replayed decode steps give the eager tokens.

The GPU lane (marker ``gpu``, ``make test-gpu``); skipped, with the reason, where torch sees no GPU. The CPU
tests of the same plumbing run with a stand-in for the recording (``test_decode_graphs.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.devices import GPU_DEVICE, needs_gpu

from shoal.engine import LLM, SamplingParams
from shoal.engine.core.step_inputs import StepBatch

pytestmark = needs_gpu

PARAMS = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def _prompts(n: int) -> list[list[int]]:
    return [[(7 * i + 13 * j) % 250 + 3 for j in range(5 + 9 * i)] for i in range(n)]


@pytest.mark.parametrize("checkpoint", ["tiny_gqa_llama_dir", "tiny_mistral_window_dir"])
def test_replayed_cuda_graphs_give_the_eager_tokens(checkpoint: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(checkpoint)
    options = {"device": GPU_DEVICE, "dtype": "float32", "num_kv_blocks": 128, "max_num_seqs": 16}
    replaying = LLM(str(path), **options)
    graphs = replaying.engine.runner.graphs
    assert graphs is not None and graphs.sizes == (1, 2, 4, 8, 16)
    assert all(type(g).__name__ == "_CudaGraph" for g in graphs.graphs.values())
    replayed: list[int] = []
    replay = graphs.replay

    def counting(step: StepBatch) -> torch.Tensor | None:
        logits = replay(step)
        if logits is not None:
            replayed.append(step.meta.num_seqs)
        return logits

    graphs.replay = counting  # type: ignore[method-assign]
    eager = LLM(str(path), enforce_eager=True, **options)
    assert eager.engine.runner.graphs is None
    for batch in (1, 3, 11):  # 3 replays the graph of 4, 11 the graph of 16
        prompts = _prompts(batch)
        got = [o.token_ids for o in replaying.generate(prompts, PARAMS)]
        assert got == [o.token_ids for o in eager.generate(prompts, PARAMS)], batch
    assert {1, 3, 11} <= set(replayed)
