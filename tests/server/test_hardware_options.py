"""``shoal serve``'s hardware options: an impossible one stops it at once naming the option, the rest are logged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from serve_harness import ServeProcess

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine that has one


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "cuda"], "--device cuda"),
        (["--quantization", "int8", "--dtype", "float32"], "--quantization"),
        (["--threads", "0"], "--threads"),
        (["--gpu-memory-utilization", "0"], "gpu_memory_utilization (--gpu-memory-utilization) must be in (0, 1]"),
        (["--gpu-memory-utilization", "1.5"], "must be in (0, 1], got 1.5"),
    ],
)
def test_impossible_hardware_options_exit_naming_the_option(
    tmp_path: Path, tiny_model_dir: Path, args: list[str], message: str
) -> None:
    server = ServeProcess(tiny_model_dir, tmp_path / "serve.log", *args, env=NO_GPU)
    try:
        assert server.process.wait(timeout=170) == 2
        log = server.log()
        assert message in log and "Traceback" not in log, log
    finally:
        server.stop()


@pytest.mark.timeout(300)
def test_chosen_hardware_is_logged_and_too_many_threads_warn(tmp_path: Path, tiny_model_dir: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    # the device left to the server (no --device): hidden GPUs, it must choose the CPU and say why
    server = ServeProcess(
        tiny_model_dir, tmp_path / "serve.log", "--threads", str(cores + 1), "--enforce-eager", env=NO_GPU, device=None
    )
    try:
        server.wait_ready()
        log = server.log()
        assert f"--threads {cores + 1} exceeds the {cores} CPUs" in log
        assert f"torch threads {cores + 1} (asked for (--threads))" in log
        assert "device cpu (no CUDA GPU) on " in log and "cpus" in log
        assert "dtype float32 (the checkpoint is float32)" in log  # the tiny checkpoint is fp32
        assert "quantization none (" in log
        assert log.count("cuda graphs off (--enforce-eager; a CPU never uses them)") == 1  # accepted, said once
    finally:
        server.stop()


def test_default_threads_are_chosen_per_step_and_logged(server: ServeProcess) -> None:
    """Without ``--threads`` the server picks torch's thread count for each step, and says so at start-up."""
    cores = len(os.sched_getaffinity(0))
    expected = f"torch threads {cores - 1}-{cores} ({cores} CPUs: all of them or one fewer (left to the event loop)"
    start_up = server.log_path.read_text(errors="replace")  # the whole log: the shared server has served others since
    assert (expected if cores >= 2 else "torch threads 1 (1 CPU)") in start_up
