"""shoal's C kernel for quantized weights x a few rows, against torch references, on every path it compiles to.

References: the dequantized weights times the *same* quantized activations (int8 codes and int8 residual codes
per block of 32: the kernel's integer sums must match to float rounding, relative 1e-5 of the output's
scale), and times the float activations (what quantizing the activations costs: stated below as
``FLOAT_MEAN`` / ``FLOAT_MAX`` of the output's standard deviation). Every path is built on this machine: ``-march=native`` (AVX512-VNNI here),
``-mno-avx512f`` (AVX-VNNI where the CPU has it), ``-mno-avx512f -mno-avxvnni`` (AVX2's maddubs), and
``-march=x86-64`` (no SIMD flags: the plain C path).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from pathlib import Path

import pytest
import torch

from shoal.cpu_features import cpu_info
from shoal.kernels.cpu import KernelUnavailable, QuantGemv, load_quant_gemv, q4_1_layout, q8_0_layout
from shoal.kernels.cpu.build import NATIVE_FLAGS, built_library
from shoal.kernels.cpu.library import OPENMP_ENTRY, defining_file, load_library, torch_openmp_runtime
from shoal.kernels.cpu.quant_gemv import SOURCE

FLOAT_MEAN, FLOAT_MAX = 1e-4, 5e-4  # of the reference output's standard deviation

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the paths are x86's")

PATHS = {
    "native": (),
    "no-avx512": ("-mno-avx512f",),
    "avx2": ("-mno-avx512f", "-mno-avxvnni"),
    "scalar": ("-march=x86-64",),
}


@pytest.fixture(scope="module", params=list(PATHS))
def kernel(request: pytest.FixtureRequest) -> QuantGemv:
    return load_quant_gemv((*NATIVE_FLAGS, *PATHS[request.param]))


def test_each_build_takes_the_path_its_flags_allow(kernel: QuantGemv, request: pytest.FixtureRequest) -> None:
    flags = cpu_info().flags
    expected = {
        "native": "avx512_vnni" if {"avx512_vnni", "avx512vl"} <= flags else None,
        "no-avx512": "avx_vnni" if "avx_vnni" in flags else None,
        "avx2": "avx2" if {"avx2", "fma", "f16c"} <= flags else None,
        "scalar": "scalar",
    }[request.node.callspec.params["kernel"]]
    if expected is None:
        pytest.skip("this CPU lacks the flags for that path")
    assert kernel.isa == expected


def quantized_activations(x: torch.Tensor) -> torch.Tensor:
    """The kernel's rounding of ``x`` per block of 32, as floats: int8 codes q at scale d = max|x| / 127
    (llama.cpp's Q8_1; round to nearest even), then the residual's int8 codes at d / 256."""
    blocks = x.float().reshape(x.shape[0], -1, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    inverse = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))
    codes = (blocks * inverse).clamp(-127, 127).round()
    residual = ((blocks - codes * scale) * inverse * 256).clamp(-127, 127).round()
    return ((256 * codes + residual) * (scale / 256)).reshape(x.shape)


def q4_weights(out: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random Q4_1 codes, scales (fp16-exact) and lows, and the weights they stand for."""
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (out, cols), dtype=torch.uint8, generator=generator)
    scales = (torch.rand(out, cols // 32, generator=generator) * 0.02).half().float()
    lows = (-torch.rand(out, cols // 32, generator=generator) * 0.15).half().float()
    weights = codes.reshape(out, -1, 32).float() * scales[..., None] + lows[..., None]
    return codes, scales, lows, weights.reshape(out, cols)


def q8_weights(out: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(-127, 128, (out, cols), dtype=torch.int8, generator=generator)
    scales = (torch.rand(out, cols // 32, generator=generator) * 0.01).half().float()
    return codes, scales, (codes.reshape(out, -1, 32).float() * scales[..., None]).reshape(out, cols)


def assert_matches(result: torch.Tensor, x: torch.Tensor, weights: torch.Tensor) -> None:
    exact = quantized_activations(x).double() @ weights.double().T
    torch.testing.assert_close(result.double(), exact, atol=1e-5 * float(exact.abs().max()), rtol=1e-5)
    reference = x.double() @ weights.double().T
    error, spread = (result.double() - reference).abs(), reference.std()
    assert error.mean() <= FLOAT_MEAN * spread and error.max() <= FLOAT_MAX * spread, (error.mean(), error.max())


@pytest.mark.parametrize("rows", [*range(1, 10), 16, 21, 64])  # past 8 in passes of 8
def test_q4_1_equals_the_dequantized_weights_times_the_quantized_activations(kernel: QuantGemv, rows: int) -> None:
    codes, scales, lows, weights = q4_weights(40, 96, seed=rows)
    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(100 + rows))
    assert_matches(kernel.q4_1(x, *q4_1_layout(codes, scales, lows)), x, weights)


@pytest.mark.parametrize("rows", [*range(1, 10), 16, 21, 64])  # past 8 in passes of 8
def test_q8_0_equals_the_dequantized_weights_times_the_quantized_activations(kernel: QuantGemv, rows: int) -> None:
    codes, scales, weights = q8_weights(24, 160, seed=rows)
    x = torch.randn(rows, 160, generator=torch.Generator().manual_seed(200 + rows)) * 3
    assert_matches(kernel.q8_0(x, *q8_0_layout(codes, scales)), x, weights)


def test_extreme_codes_and_a_zero_block_do_not_overflow(kernel: QuantGemv) -> None:
    """Q4 code 15 and Q8 codes of +-127 against activations at +-127 everywhere (the sums' largest), and a block
    of zero activations (scale 0)."""
    x = torch.tensor([[1.0, -1.0] * 16 + [0.0] * 32 + [-2.0] * 32])
    q4 = torch.full((8, 96), 15, dtype=torch.uint8)
    ones = torch.ones(8, 3)
    assert_matches(kernel.q4_1(x, *q4_1_layout(q4, ones, ones)), x, q4.float() + 1)
    q8 = torch.tensor([127, -127], dtype=torch.int8).repeat(8, 48)
    assert_matches(kernel.q8_0(x, *q8_0_layout(q8, ones)), x, q8.float())


def test_q8_0_code_minus_128_is_read_as_itself(kernel: QuantGemv) -> None:
    """int8's -128 (a GGUF writer may use it; llama.cpp's own stops at -127) against activations of both signs:
    moving an activation's sign onto the weight, as ``vpmaddubsw`` needs, would turn it into -128 again."""
    x = torch.tensor([[3.0, -3.0, 0.5, -0.25] * 8, [-1.0] * 32])
    q8 = torch.tensor([-128, 127, -128, 5], dtype=torch.int8).repeat(8, 8)
    assert_matches(kernel.q8_0(x, *q8_0_layout(q8, torch.ones(8, 1))), x, q8.float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_more_than_eight_rows_give_each_pass_of_eight_its_own_result_to_the_bit(
    kernel: QuantGemv, dtype: torch.dtype
) -> None:
    """Past 8 rows a call goes over each weight tile in passes of 8 rows (the last shorter): each row's output is
    what a call with its pass's rows alone gives, so a batch of 21 decodes as three calls of 8, 8 and 5 would."""
    codes, scales, lows, _ = q4_weights(40, 96, seed=11)
    q8_codes, q8_scales, _ = q8_weights(40, 96, seed=12)
    x = torch.randn(21, 96, generator=torch.Generator().manual_seed(13)).to(dtype)
    for call, packed in (
        (kernel.q4_1, q4_1_layout(codes, scales, lows)),
        (kernel.q8_0, q8_0_layout(q8_codes, q8_scales)),
    ):
        passes = torch.cat([call(x[first : first + 8], *packed) for first in range(0, 21, 8)])
        assert torch.equal(call(x, *packed), passes)


def test_bf16_activations_give_the_float32_result_rounded(kernel: QuantGemv) -> None:
    codes, scales, lows, _ = q4_weights(64, 128, seed=7)
    packed = q4_1_layout(codes, scales, lows)
    x = torch.randn(3, 128).bfloat16()
    result = kernel.q4_1(x, *packed)
    assert result.dtype == torch.bfloat16
    assert torch.equal(result, kernel.q4_1(x.float(), *packed).bfloat16())


def test_non_contiguous_activations_and_every_thread_count_give_the_same_result(kernel: QuantGemv) -> None:
    codes, scales, weights = q8_weights(64, 64, seed=3)
    packed = q8_0_layout(codes, scales)
    x = torch.randn(64, 4).T  # a transposed view
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel.q8_0(x, *packed)
        torch.set_num_threads(2)
        assert torch.equal(kernel.q8_0(x, *packed), one)  # each output row is one thread's, whatever the count
    finally:
        torch.set_num_threads(threads)
    assert_matches(one, x, weights)


def test_shapes_the_kernel_cannot_take_are_refused_with_the_reason(kernel: QuantGemv) -> None:
    codes, scales, lows, _ = q4_weights(16, 64, seed=1)
    with pytest.raises(ValueError, match="input size must be a positive multiple of 32 and the output size of 8"):
        q4_1_layout(codes[:, :48], scales[:, :1], lows[:, :1])
    with pytest.raises(ValueError, match="got 64 -> 12"):
        q4_1_layout(codes[:12], scales[:12], lows[:12])
    with pytest.raises(ValueError, match=r"scales must be \[out, in / 32\] = \[16, 2\], got \[16, 1\]"):
        q4_1_layout(codes, scales[:, :1], lows)
    with pytest.raises(ValueError, match=r"codes must be torch\.int8"):
        q8_0_layout(codes, scales)
    packed = q4_1_layout(codes, scales, lows)
    for x in (torch.randn(65, 64), torch.randn(0, 64), torch.randn(2, 32), torch.randn(64)):
        with pytest.raises(ValueError, match=r"x must be \[rows, 64\] with 1 <= rows <= 64"):
            kernel.q4_1(x, *packed)
    with pytest.raises(ValueError, match=r"float32 or bfloat16 CPU tensor, got torch\.float16"):
        kernel.q4_1(torch.randn(2, 64).half(), *packed)


def test_one_openmp_runtime_serves_torch_and_the_kernel(kernel: QuantGemv) -> None:
    """The kernel's OpenMP entry point is torch's, and its parallel region reuses the workers torch's ops
    started: the process's thread count does not grow (two pools would oversubscribe the CPUs)."""
    codes, scales, _ = q8_weights(64, 64, seed=5)
    packed, x = q8_0_layout(codes, scales), torch.randn(2, 64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.randn(256, 256) @ torch.randn(256, 256)  # torch's OpenMP region at 2 threads
        before = len(os.listdir("/proc/self/task"))
        kernel.q8_0(x, *packed)
        assert len(os.listdir("/proc/self/task")) == before
    finally:
        torch.set_num_threads(threads)
    runtime = defining_file(kernel._library, OPENMP_ENTRY)
    assert runtime is not None and runtime == torch_openmp_runtime()
    torch_gomp = Path(torch.__file__).parent / "lib" / "libgomp.so.1"
    if torch_gomp.exists():  # torch's wheel ships one: the kernel's library took that one, not the system's
        assert runtime == str(torch_gomp.resolve())


def test_an_openmp_runtime_vendored_by_another_wheel_leaves_the_kernels_alone() -> None:
    """sentencepiece's wheel vendors a renamed libgomp, loaded whenever ``gguf`` is imported with it installed:
    the kernels still bind torch's runtime and load (they were refused while any second runtime was mapped).
    ``make install`` keeps that wheel beside the venv, in ``sentencepiece-reference``."""
    places = (Path(torch.__file__).parent.parent, Path(sys.prefix) / "sentencepiece-reference")
    vendored = sorted(p for place in places for p in place.glob("*.libs/libgomp-*.so*"))
    assert vendored, f"no vendored libgomp in {[str(p) for p in places]}: run make install"
    ctypes.CDLL(str(vendored[0]))
    library = load_library(SOURCE)
    assert defining_file(library, OPENMP_ENTRY) == torch_openmp_runtime()


def test_builds_are_cached_per_flags_and_concurrent_builds_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    flags = (*NATIVE_FLAGS, "-march=x86-64")
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(built_library(SOURCE, flags))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(paths) == 3 and len(set(paths)) == 1 and paths[0].is_relative_to(tmp_path)
    assert [p.name for p in paths[0].parent.iterdir()] == ["quant_gemv.so"]  # no temporary left behind
    built = paths[0].stat().st_mtime_ns
    assert built_library(SOURCE, flags) == paths[0] and paths[0].stat().st_mtime_ns == built  # not rebuilt
    assert built_library(SOURCE, NATIVE_FLAGS) != paths[0]


def test_no_compiler_or_a_failed_build_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    with pytest.raises(KernelUnavailable, match="no C compiler: '/nonexistent'"):
        load_quant_gemv(cc="/nonexistent")
    with pytest.raises(KernelUnavailable, match=r"exited 1: .*no-such-flag"):
        load_quant_gemv((*NATIVE_FLAGS, "-fno-such-flag"))
