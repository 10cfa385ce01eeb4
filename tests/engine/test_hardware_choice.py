"""The device / dtype / quantization / thread choices, fed the flag sets of the CPUs users have."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from shoal.cpu_features import REPORTED_FLAGS, cpu_info, parse_cpuinfo
from shoal.engine.hardware import choose_device, choose_dtype, choose_quantization, choose_threads

AVX2_ONLY = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})  # a laptop or a cloud VM without AVX-512
AVX512_NO_BF16 = AVX2_ONLY | {"avx512f", "avx512bw", "avx512vl"}  # Skylake-SP / Cascade Lake
SAPPHIRE_RAPIDS = AVX512_NO_BF16 | {"avx512_bf16", "amx_bf16", "amx_tile", "amx_int8", "avx512_fp16"}
AMX_ONLY_BF16 = AVX2_ONLY | {"amx_bf16", "amx_tile"}

flag_sets = st.frozensets(st.sampled_from([*REPORTED_FLAGS, "sse4_2", "fma", "amx_tile"]))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [(AVX2_ONLY, "float32"), (AVX512_NO_BF16, "float32"), (SAPPHIRE_RAPIDS, "bfloat16"), (AMX_ONLY_BF16, "bfloat16")],
)
def test_auto_dtype_is_bf16_only_where_the_cpu_computes_it(flags: frozenset[str], expected: str) -> None:
    choice = choose_dtype("auto", "cpu", flags, checkpoint_dtype=None)
    assert choice.value == expected
    assert choice.warning is None
    assert ("native" in choice.reason) and (("no native" in choice.reason) == (expected == "float32"))


def test_a_float32_checkpoint_stays_float32_even_with_native_bf16() -> None:
    assert choose_dtype("auto", "cpu", SAPPHIRE_RAPIDS, "float32").value == "float32"
    assert choose_dtype("auto", "cpu", SAPPHIRE_RAPIDS, "bfloat16").value == "bfloat16"
    assert choose_dtype("auto", "cpu", AVX2_ONLY, "bfloat16").value == "float32"


def test_bfloat16_asked_for_on_avx2_works_but_warns_naming_the_option() -> None:
    choice = choose_dtype("bfloat16", "cpu", AVX2_ONLY, None)
    assert choice.value == "bfloat16"
    assert choice.warning is not None and "--dtype bfloat16" in choice.warning and "avx512_bf16" in choice.warning
    assert choose_dtype("bfloat16", "cpu", SAPPHIRE_RAPIDS, None).warning is None
    assert choose_dtype("float32", "cpu", AVX2_ONLY, None).warning is None


def test_cuda_runs_the_checkpoints_half_precision_dtype() -> None:
    assert choose_dtype("auto", "cuda", AVX2_ONLY, "float16").value == "float16"
    assert choose_dtype("auto", "cuda", AVX2_ONLY, "bfloat16").value == "bfloat16"
    assert choose_dtype("auto", "cuda", AVX2_ONLY, "float32").value == "bfloat16"
    assert choose_dtype("auto", "cuda", AVX2_ONLY, None, cuda_bf16=False).value == "float16"
    assert choose_dtype("bfloat16", "cuda", AVX2_ONLY, None).warning is None  # CPU flags do not matter there


@given(
    requested=st.sampled_from(["auto", "float32", "bfloat16", "float16"]),
    flags=flag_sets,
    checkpoint=st.sampled_from([None, "float32", "bfloat16", "float16"]),
)
def test_dtype_policy(requested: str, flags: frozenset[str], checkpoint: str | None) -> None:
    choice = choose_dtype(requested, "cpu", flags, checkpoint)
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    if requested != "auto":
        assert choice.value == requested
        native_fp16 = bool(flags & {"avx512_fp16", "amx_fp16"})
        slow = (requested == "bfloat16" and not native) or (requested == "float16" and not native_fp16)
        assert (choice.warning is not None) == slow
    else:
        assert choice.value in ("float32", "bfloat16")
        assert choice.warning is None
        if choice.value == "bfloat16":
            assert native and checkpoint != "float32"


def test_device_auto_follows_cuda_and_cuda_without_a_gpu_is_an_error_naming_the_option() -> None:
    assert choose_device("auto", cuda_available=True).value == "cuda"
    assert choose_device("auto", cuda_available=False).value == "cpu"
    assert choose_device("cpu", cuda_available=True).value == "cpu"
    with pytest.raises(ValueError, match="--device cuda"):
        choose_device("cuda", cuda_available=False)
    with pytest.raises(ValueError, match="device must be one of"):
        choose_device("tpu", cuda_available=False)


def test_quantization_default_per_source_format() -> None:
    q41 = frozenset({"Q4_1"})
    assert choose_quantization("auto", "cpu", "bfloat16", "gguf", q41).value == "int4"
    assert choose_quantization("auto", "cpu", "bfloat16", "gguf", frozenset({"Q4_0", "Q4_1"})).value == "int4"
    assert choose_quantization("auto", "cpu", "bfloat16", "gguf", frozenset({"Q4_1", "Q6_K"})).value == "none"
    assert choose_quantization("auto", "cpu", "bfloat16", "gguf", frozenset({"F16"})).value == "none"
    assert choose_quantization("auto", "cpu", "bfloat16", "hf", frozenset()).value == "none"
    assert choose_quantization("auto", "cpu", "float32", "gguf", q41).value == "none"  # AVX2-only, torch's kernel
    assert choose_quantization("auto", "cuda", "bfloat16", "gguf", q41).value == "none"


def test_an_avx2_only_cpus_float32_gets_int4_where_the_c_kernel_serves() -> None:
    q41 = frozenset({"Q4_1"})
    dtype = choose_dtype("auto", "cpu", AVX2_ONLY, None).value
    chosen = choose_quantization("auto", "cpu", dtype, "gguf", q41, c_kernel=True)
    assert (dtype, chosen.value) == ("float32", "int4")
    assert "shoal's C kernel with float32 activations" in chosen.reason
    assert choose_quantization("int4", "cpu", "float32", "gguf", q41, c_kernel=True).value == "int4"
    assert choose_quantization("auto", "cpu", "float32", "gguf", frozenset({"F16"}), c_kernel=True).value == "none"
    assert choose_quantization("auto", "cpu", "float16", "gguf", q41, c_kernel=True).value == "none"
    with pytest.raises(ValueError, match=r"--quantization.*--dtype bfloat16"):  # torch's int8 kernel, either way
        choose_quantization("int8", "cpu", "float32", "hf", frozenset(), c_kernel=True)


def test_quantization_that_cannot_run_is_an_error_naming_the_option() -> None:
    assert choose_quantization("int8", "cpu", "bfloat16", "hf", frozenset()).value == "int8"
    with pytest.raises(ValueError, match=r"--quantization.*--dtype bfloat16.*C kernel.*unavailable"):
        choose_quantization("int4", "cpu", "float32", "gguf", frozenset({"Q4_1"}))
    with pytest.raises(ValueError, match=r"--quantization.*CPU kernels"):
        choose_quantization("int8", "cuda", "bfloat16", "hf", frozenset())
    with pytest.raises(ValueError, match="quantization must be one of"):
        choose_quantization("fp8", "cpu", "bfloat16", "hf", frozenset())


def test_threads_default_to_a_per_step_choice_and_warn_above_the_cores() -> None:
    assert choose_threads(None, 1).value == "1"
    assert choose_threads(None, 2).value == "1-2"
    assert choose_threads(None, 16).value == "15-16"
    over = choose_threads(4, 2)
    assert over.value == "4" and over.warning is not None and "--threads 4" in over.warning
    assert choose_threads(2, 2).warning is None
    with pytest.raises(ValueError, match="--threads"):
        choose_threads(0, 2)


def test_on_cuda_the_thread_count_is_fixed_and_no_per_step_policy_times_gpu_steps() -> None:
    from shoal.engine.server.serve_main import set_threads

    assert choose_threads(None, 16, "cuda").value == "15"
    assert choose_threads(None, 1, "cuda").value == "1"
    assert choose_threads(3, 16, "cuda").value == "3"
    before = torch.get_num_threads()
    try:
        cores = cpu_info().cores
        assert set_threads(None, "cuda") is None
        assert torch.get_num_threads() == max(1, cores - 1)
        assert (set_threads(None, "cpu") is not None) == (cores >= 2)
    finally:
        torch.set_num_threads(before)


def test_cpuinfo_parsing_reads_model_and_flags() -> None:
    text = "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu avx2 avx512f amx_bf16\n\nprocessor\t: 1\n"
    info = parse_cpuinfo(text, cores=2)
    assert info.model == "Test CPU" and info.native_bf16
    assert info.summary() == "Test CPU, 2 cpus, avx2 avx512f amx_bf16"
    assert not parse_cpuinfo("model name : x\nflags : avx2\n", 1).native_bf16
