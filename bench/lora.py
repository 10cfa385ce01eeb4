"""LoRA benchmark: 64 concurrent requests spread over 8 adapters against the same 64 on the base model alone.

One ``shoal serve`` with ``--enable-lora --max-loras 8``, ``--adapters`` random rank-``--rank`` adapters on every
attention and MLP projection (written in PEFT's format from the model's shapes, so any model works, the bundled
GGUF included), and two rounds on the same engine: ``--requests`` requests at once for the base model, then the
same number for the adapters in turn (request ``i`` -> adapter ``i mod --adapters``). Every request has its own
prompt (no prefix-cache help) and generates exactly ``--output-len`` tokens. Reported: generated tokens per second
of each round and their ratio (the cost of the per-row LoRA deltas).

On a CUDA GPU a kernel row comes first: one fused q/k/v projection's LoRA delta in bf16, the Triton kernels
(shrink + expand, each token through its slot) against the torch path on the same GPU (masked for a decode step
of ``--requests`` tokens, grouped by slot for a 2,048-token prefill), adapters round robin, and the largest
difference between the two deltas; on a CPU it says it was skipped. ``--kernels-only`` stops after it.

    .venv/bin/python bench/lora.py --json /tmp/lora.json
    .venv/bin/python bench/lora.py --requests 8 --adapters 2 --output-len 4   # a quick check
    .venv/bin/python bench/lora.py --kernels-only                            # a GPU session's kernel row
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import torch
from safetensors.torch import save_file

from shoal.engine.loader.load import load_config
from shoal.engine.model_config import ModelConfig
from shoal.local import LocalProcess
from shoal.local.process import shoal_command
from shoal.model_registry import resolve_model

SERVED = "bench"
PREFILL_TOKENS = 2048


class _FixedOutput(torch.nn.Module):
    """Stands in for the base projection in the kernel row, so only the LoRA delta is timed: the same output
    tensor each call (the deltas add up in it; their 0.01-scale weights keep bf16 finite)."""

    def __init__(self, out: torch.Tensor) -> None:
        super().__init__()
        self.out = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out


def write_adapter(config: ModelConfig, directory: Path, rank: int, seed: int) -> Path:
    """A random PEFT LoRA adapter on q/k/v/o and gate/up/down of every layer (small weights: text stays sane)."""
    gen = torch.Generator().manual_seed(seed)
    hidden, inter = config.hidden_size, config.intermediate_size
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shapes = {
        "self_attn.q_proj": (hidden, q),
        "self_attn.k_proj": (hidden, kv),
        "self_attn.v_proj": (hidden, kv),
        "self_attn.o_proj": (q, hidden),
        "mlp.gate_proj": (hidden, inter),
        "mlp.up_proj": (hidden, inter),
        "mlp.down_proj": (inter, hidden),
    }
    tensors = {}
    for layer in range(config.num_layers):
        for module, (fan_in, fan_out) in shapes.items():
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, fan_in, generator=gen) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, rank, generator=gen) * 0.01
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    targets = [m.split(".")[1] for m in shapes]
    lora = {"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": targets, "bias": "none"}
    (directory / "adapter_config.json").write_text(json.dumps(lora))
    return directory


async def round_of(url: str, models: list[str], output_len: int) -> dict[str, float]:
    """All requests at once; generated tokens per second over the round's wall time."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:

        async def one(i: int, model: str) -> int:
            body = {
                "model": model,
                "prompt": f"Request {i}: tell me a story about the number {i * 7919}.",
                "max_tokens": output_len,
                "temperature": 0,
                "ignore_eos": True,
            }
            response = await client.post("/v1/completions", json=body)
            response.raise_for_status()
            return int(response.json()["usage"]["completion_tokens"])

        start = time.perf_counter()
        tokens = await asyncio.gather(*(one(i, m) for i, m in enumerate(models)))
        seconds = time.perf_counter() - start
    return {"requests": len(models), "tokens": sum(tokens), "seconds": seconds, "tokens_per_s": sum(tokens) / seconds}


def kernel_row(
    config: ModelConfig,
    adapters: int,
    rank: int,
    decode_tokens: int,
    device: str = "cuda",
    prefill_tokens: int = PREFILL_TOKENS,
    repeats: int = 100,
) -> dict[str, object]:
    """Microseconds per call of the q/k/v LoRA delta, Triton vs torch, for a decode step and a prefill, and the
    largest difference between the two deltas (the compiled kernels' check); on a CPU only under
    ``TRITON_INTERPRET=1`` (the smoke test's tiny shapes)."""
    if device == "cuda" and not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU: the LoRA kernels run compiled on one"}
    from kernels import timed  # bench/kernels.py, beside this script

    from shoal.engine.lora.manager import LoRAManager
    from shoal.engine.model.lora_linear import LoRABatch, LoRALinear, ProjectionShape
    from shoal.kernels import TorchOps, get_ops

    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shape = ProjectionShape(config.hidden_size, (q, kv, kv))
    gen = torch.Generator().manual_seed(0)
    weights = [
        [(p, torch.randn(rank, shape.in_features, generator=gen) * 0.01, torch.randn(n, rank, generator=gen) * 0.01)
         for p, n in enumerate(shape.part_sizes)]
        for _ in range(adapters)
    ]  # fmt: skip
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreted)"
    row: dict[str, object] = {"device": name, "projection": "qkv", "dtype": "bfloat16"}
    for step, tokens, per_row in (
        ("decode", decode_tokens, 1),
        ("prefill", prefill_tokens, prefill_tokens // adapters),
    ):
        row_slots = [(i % adapters, per_row) for i in range(tokens // per_row)]
        x = torch.randn(sum(n for _, n in row_slots), shape.in_features, device=device).to(torch.bfloat16)
        out = torch.zeros(x.shape[0], sum(shape.part_sizes), device=device, dtype=torch.bfloat16)
        deltas = []
        for backend, ops in (("triton", get_ops("triton", device)), ("torch", TorchOps())):
            batch = LoRABatch()
            layer = LoRALinear(_FixedOutput(out), shape, adapters, rank, batch, ops, torch.bfloat16, device)
            for slot, parts in enumerate(weights):
                layer.set_slot(slot, parts)
            manager = LoRAManager({(0, "self_attn.qkv_proj"): layer}, batch, adapters, rank, ops.lora_by_token)
            manager.prepare(row_slots, device)
            with torch.inference_mode():
                row[f"{step}_{x.shape[0]}_tokens_{backend}_us"] = timed(partial(layer, x), device, repeats) * 1e6
                deltas.append(_delta(layer, out, x))
        row[f"{step}_max_abs_delta"] = deltas[1].abs().max().item()  # the torch path's, for scale
        row[f"{step}_max_abs_err"] = (deltas[0] - deltas[1]).abs().max().item()
    return row


def _delta(layer: torch.nn.Module, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One call's delta alone, in fp32: the shared output zeroed first."""
    out.zero_()
    return layer(x).float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="the engine's --threads (default: its own choice)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--kernels-only", action="store_true", help="the kernel row alone (it needs a CUDA GPU)")
    args = parser.parse_args()
    config = load_config(resolve_model(args.model))
    kernels = kernel_row(config, args.adapters, args.rank, args.requests)
    print(json.dumps({"kernels": kernels}, indent=2))
    if args.kernels_only:
        return
    with tempfile.TemporaryDirectory(prefix="shoal-lora-bench-") as tmp:
        root = Path(tmp)
        names = [f"adapter-{i}" for i in range(args.adapters)]
        modules = [f"{n}={write_adapter(config, root / n, args.rank, seed=i)}" for i, n in enumerate(names)]
        argv = shoal_command(
            "serve", "--model", args.model, "--served-model-name", SERVED,
            "--max-num-seqs", str(args.requests), "--enable-lora", "--max-loras", str(args.adapters),
            "--max-lora-rank", str(args.rank), "--lora-modules", *modules,
        )  # fmt: skip
        if args.threads is not None:
            argv += ["--threads", str(args.threads)]
        server = LocalProcess(argv, root / "serve.log")
        try:
            server.wait_ready()
            url = server.url
            asyncio.run(round_of(url, [SERVED] * 2, 2))  # warm-up: the step threads' first choices
            base = asyncio.run(round_of(url, [SERVED] * args.requests, args.output_len))
            lora = asyncio.run(round_of(url, [names[i % len(names)] for i in range(args.requests)], args.output_len))
        finally:
            server.stop()
    result = {
        "model": args.model,
        "adapters": args.adapters,
        "rank": args.rank,
        "kernels": kernels,
        "base": base,
        "lora": lora,
        "lora_over_base": lora["tokens_per_s"] / base["tokens_per_s"],
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
