"""On a GPU the KV cache takes what ``--gpu-memory-utilization`` leaves after the weights and a profiling forward.

The arithmetic is ``kv_budget``'s, tested on any machine in ``test_kv_cache_sizing.py``; these check the CUDA
measurements feeding it. Skipped, with the reason, where torch sees no GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shoal.engine import LLM, SamplingParams
from shoal.engine.model import kv_cache_bytes_per_block

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is false)"),
]


def test_the_engine_stays_within_its_fraction_of_the_gpu(
    tiny_gqa_llama_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    utilization = round(min(0.3, free / total - 0.05), 2)
    with caplog.at_level("INFO", logger="shoal.engine.core"):
        llm = LLM(str(tiny_gqa_llama_dir), device="cuda", dtype="bfloat16", gpu_memory_utilization=utilization)
    plan = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up plan:"))
    assert f"--gpu-memory-utilization {utilization} of the " in plan
    phases = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up took"))
    assert "profiling" in phases
    engine = llm.engine
    kv_bytes = engine.block_manager.num_blocks * kv_cache_bytes_per_block(engine.model_config, 16, torch.bfloat16)
    assert torch.cuda.memory_reserved() <= total * utilization  # what torch holds stays within the fraction
    assert kv_bytes >= total * utilization - 2 * 2**30  # a tiny model's weights and activations take < 2 GiB
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    assert len(llm.generate([list(range(3, 40))], params)[0].token_ids) == 8


def test_a_fraction_that_leaves_nothing_for_the_cache_is_refused_naming_it(tiny_gqa_llama_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"--gpu-memory-utilization 1e-05 allows .* taken before any KV cache"):
        LLM(str(tiny_gqa_llama_dir), device="cuda", dtype="bfloat16", gpu_memory_utilization=0.00001)
