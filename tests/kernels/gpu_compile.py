"""Compiles every Triton kernel for an NVIDIA GPU target, down to a cubin, on a machine without a GPU.

The interpreter proves what the kernels compute, not that they compile: `tl.dot` shape limits, constexpr
branches and early returns are only checked by the real compiler. Triton's compiler needs no driver when it
is handed a target, and its wheel ships ptxas, so this runs anywhere. It must run without
``TRITON_INTERPRET`` (the kernels are then plain ``JITFunction``s): ``test_gpu_compile.py`` starts it as a
subprocess. Prints one line per kernel variant: whether the cubin uses tensor-core instructions, and the
registers and spilled bytes ptxas reports for it.

    python tests/kernels/gpu_compile.py [--dtype bf16] [capability ...]     (default: all dtypes, sm_90 and sm_80)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

from shoal.kernels.triton.activation import _silu_and_mul_kernel
from shoal.kernels.triton.decode_attention import BLOCK_N as DECODE_BLOCK_N
from shoal.kernels.triton.decode_attention import MAX_SPLITS as DECODE_MAX_SPLITS
from shoal.kernels.triton.decode_attention import NUM_WARPS as DECODE_WARPS
from shoal.kernels.triton.decode_attention import _decode_kernel, _merge_kernel
from shoal.kernels.triton.grouped_matmul import BLOCK_K as GROUPED_BLOCK_K
from shoal.kernels.triton.grouped_matmul import BLOCK_M as GROUPED_BLOCK_M
from shoal.kernels.triton.grouped_matmul import BLOCK_N as GROUPED_BLOCK_N
from shoal.kernels.triton.grouped_matmul import _grouped_matmul_kernel
from shoal.kernels.triton.kv_cache import _write_kv_kernel
from shoal.kernels.triton.lora import BLOCK_K as LORA_BLOCK_K
from shoal.kernels.triton.lora import BLOCK_M as LORA_BLOCK_M
from shoal.kernels.triton.lora import EXPAND_BLOCK_N, SHRINK_MAX_BLOCK_N, _lora_expand_kernel, _lora_shrink_kernel
from shoal.kernels.triton.prefill_attention import BLOCK_N as PREFILL_BLOCK_N
from shoal.kernels.triton.prefill_attention import _prefill_kernel, num_warps
from shoal.kernels.triton.rms_norm import _rms_norm_kernel
from shoal.kernels.triton.rotary import _rotary_kernel
from shoal.kernels.triton.rotary_kv_cache import _rotary_write_kv_kernel

TRITON_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
FLOAT_ARGS = {"qk_scale", "softcap", "eps"}


def compile_kernel(
    fn, capability: int, dtype: str, constexprs: dict, pointers: dict[str, str] | None = None, warps: int = 4
):
    """Pointer args default to ``dtype`` elements, other args to i32 (fp32 for scales); ``pointers`` overrides."""
    pointers = pointers or {}
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*" + pointers.get(name, dtype)
        else:
            signature[name] = "fp32" if name in FLOAT_ARGS else "i32"
    source = ASTSource(fn, signature, constexprs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": warps})


def register_usage(ptx: str, capability: int) -> tuple[int, int]:
    """(registers per thread, bytes spilled) as ``ptxas -v`` reports them for the kernel's PTX."""
    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as source:
        source.write(ptx)
        source.flush()
        report = subprocess.run(
            [get_ptxas(capability).path, "-v", "--gpu-name", arch, source.name, "-o", "/dev/null"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    return registers, spilled


def variants(dtype: str):
    """(label, kernel, constexprs, pointer overrides, warps) for each kernel, as its launcher sets it up."""
    fp32 = dtype == "fp32"
    index = {"block_tables_ptr": "i32", "seq_lens_ptr": "i32", "query_start_loc_ptr": "i32"}
    partials = {"part_acc_ptr": "fp32", "part_max_ptr": "fp32", "part_sum_ptr": "fp32"}
    decode = dict(
        GROUP=4,
        BLOCK_G=16,
        HEAD_DIM=128,
        BLOCK_D=128,
        BLOCK_SIZE=16,
        BLOCK_N=DECODE_BLOCK_N,
        NUM_SPLITS=4,
        UPCAST=False,
        FP32_DOTS=fp32,
        WINDOW=False,
        SOFTCAP=False,
    )
    for label, overrides in (
        ("decode (GQA 4, split 4)", {}),
        ("decode (GQA 3, head_dim 64, unsplit)", dict(GROUP=3, HEAD_DIM=64, BLOCK_D=64, NUM_SPLITS=1)),
        ("decode (GQA 4, split 4, window)", dict(WINDOW=True)),
        ("decode (GQA 4, split 4, window, soft cap)", dict(WINDOW=True, SOFTCAP=True)),
    ):
        yield label, _decode_kernel, decode | overrides, {**index, **partials}, DECODE_WARPS
    for splits in (4, DECODE_MAX_SPLITS):
        merge = dict(HEAD_DIM=128, BLOCK_D=128, NUM_SPLITS=splits, BLOCK_SPLITS=splits)
        yield f"merge ({splits} splits)", _merge_kernel, merge, partials, 4
    prefill = dict(
        GROUP=4,
        BLOCK_G=4,
        BLOCK_Q=16,
        HEAD_DIM=128,
        BLOCK_D=128,
        BLOCK_SIZE=16,
        BLOCK_N=PREFILL_BLOCK_N,
        UPCAST=False,
        FP32_DOTS=fp32,
        WINDOW=False,
        SOFTCAP=False,
    )
    for label, overrides in (
        ("prefill (GQA 4)", {}),
        ("prefill (GQA 4, window, soft cap)", dict(WINDOW=True, SOFTCAP=True)),
    ):
        yield label, _prefill_kernel, prefill | overrides, index, num_warps(128)
    yield (
        "write_kv",
        _write_kv_kernel,
        dict(NUM_KV_HEADS=8, HEAD_DIM=128, BLOCK_H=8, BLOCK_D=128),
        {"slot_mapping_ptr": "i64"},
        4,
    )
    yield "add_rms_norm", _rms_norm_kernel, dict(HAS_RESIDUAL=True, BLOCK=4096), {}, 4
    yield (
        "rotary",
        _rotary_kernel,
        dict(HALF=64, BLOCK_HALF=64, BLOCK_H=32, BLOCK_KVH=8),
        {"positions_ptr": "i64", "cache_ptr": "fp32"},
        4,
    )
    rope_kv = dict(HALF=64, BLOCK_HALF=64, BLOCK_H=32, NUM_KV_HEADS=8, BLOCK_KVH=8, HEAD_DIM=128, BLOCK_D=128)
    rope_kv_pointers = {"positions_ptr": "i64", "cos_sin_ptr": "fp32", "slot_mapping_ptr": "i64"}
    for label, overrides in (
        ("rotary_write_kv", {}),
        ("rotary_write_kv (partial rotary)", dict(HALF=32, BLOCK_HALF=32)),
    ):
        yield label, _rotary_write_kv_kernel, rope_kv | overrides, rope_kv_pointers, 4
    yield "silu_and_mul", _silu_and_mul_kernel, dict(BLOCK=1024), {}, 4
    yield (
        "grouped_matmul (experts)",
        _grouped_matmul_kernel,
        dict(BLOCK_M=GROUPED_BLOCK_M, BLOCK_N=GROUPED_BLOCK_N, BLOCK_K=GROUPED_BLOCK_K, UPCAST=False, FP32_DOTS=fp32),
        {"tile_expert_ptr": "i32", "tile_start_ptr": "i32", "tile_end_ptr": "i32"},
        4,
    )
    lora_tokens = {"sorted_ptr": "i32", "starts_ptr": "i32", "counts_ptr": "i32", "t_ptr": "fp32"}
    shrink = dict(BLOCK_M=LORA_BLOCK_M, BLOCK_N=SHRINK_MAX_BLOCK_N, BLOCK_K=LORA_BLOCK_K, UPCAST=False, FP32_DOTS=fp32)
    for split_k in (1, 4):
        yield f"lora_shrink (split {split_k})", _lora_shrink_kernel, shrink | dict(SPLIT_K=split_k), lora_tokens, 4
    expand = dict(NUM_PARTS=3, BLOCK_M=LORA_BLOCK_M, BLOCK_N=EXPAND_BLOCK_N, BLOCK_K=16, FP32_DOTS=fp32)
    yield "lora_expand (q, k, v)", _lora_expand_kernel, expand, lora_tokens, 4


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capabilities", nargs="*", type=int, default=[90, 80])
    parser.add_argument("--dtype", action="append", choices=list(TRITON_DTYPES.values()))
    args = parser.parse_args(argv)
    for capability in args.capabilities:
        for dtype in args.dtype or TRITON_DTYPES.values():
            for label, fn, constexprs, pointers, warps in variants(dtype):
                kernel = compile_kernel(fn, capability, dtype, constexprs, pointers, warps)
                ptx = kernel.asm["ptx"]
                mma = "wgmma" if "wgmma" in ptx else "mma" if "mma.sync" in ptx else "no mma"
                registers, spilled = register_usage(ptx, capability)
                print(
                    f"sm_{capability} {dtype} {label}: cubin {len(kernel.asm['cubin'])} bytes, {mma}, "
                    f"{registers} registers, {spilled} bytes spilled"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
