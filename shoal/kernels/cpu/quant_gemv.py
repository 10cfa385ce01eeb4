"""The C kernel for quantized weights times a few rows (``quant_gemv.c``): its weight layouts and its calls.

Weights are repacked once, at load, into the layout the kernel streams (the C source's header says why): output
rows in tiles of 8, each tile's block of 32 inputs as 8 steps of 4 inputs per row. Q4_1: ``codes [out / 8,
in / 32, 128]`` bytes (steps k and k + 4 in the low and high nibbles) and ``scales [out / 8, in / 32, 2, 8]``
fp16 (the 8 rows' scales, then their mins); Q8_0: ``codes [out / 8, in / 32, 256]`` int8 and ``scales [out / 8,
in / 32, 8]`` fp16. The bytes are the GGUF file's (fp16 scales are half the bytes of f32). A call quantizes its
activations per block of 32 (int8 codes, a scale, their sum) and multiplies in integers, with OpenMP over the
tiles on ``torch.get_num_threads()`` threads: the step-threads policy sets that count per step. ctypes releases
the GIL for the call, so the event loop runs meanwhile.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from shoal.kernels.cpu.build import NATIVE_FLAGS
from shoal.kernels.cpu.library import KernelUnavailable, entry_point, load_library

SOURCE = Path(__file__).with_name("quant_gemv.c")
BLOCK = 32
TILE = 8  # output rows per tile (the C source's TILE)
STEP = 4  # inputs per step
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
Q4_1, Q8_0 = 0, 1  # the C source's SHOAL_Q4_1, SHOAL_Q8_0
ERRORS = {1: "bad shape", 2: "bad dtype", 3: "out of memory for the quantized activations", 4: "bad kind"}


class QuantGemv:
    """Calls into one loaded build of ``quant_gemv.c``."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._library = library
        library.shoal_isa.restype = ctypes.c_char_p
        self.isa: str = library.shoal_isa().decode()
        self.max_rows: int = library.shoal_max_rows()
        self._gemv = library.shoal_gemv
        # kind, codes, scales, x, x's dtype, y, y's dtype, rows, in, out, threads
        self._gemv.argtypes = (
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
            ctypes.c_int,
        )
        self._gemv.restype = ctypes.c_int
        self.address = entry_point(self._gemv)  # for shoal.kernels.cpu.decode_layers' table

    def q4_1(self, x: Tensor, codes: Tensor, scales: Tensor) -> Tensor:
        """``x [rows, in] @ W.T`` for Q4_1 weights in this module's layout (``q4_1_layout``)."""
        return self._call(Q4_1, "q4_1", x, codes, scales)

    def q8_0(self, x: Tensor, codes: Tensor, scales: Tensor) -> Tensor:
        """``x [rows, in] @ W.T`` for Q8_0 weights in this module's layout (``q8_0_layout``)."""
        return self._call(Q8_0, "q8_0", x, codes, scales)

    def _call(self, kind: int, name: str, x: Tensor, codes: Tensor, scales: Tensor) -> Tensor:
        tiles, blocks = codes.shape[:2]
        cols, out_features, shape = blocks * BLOCK, tiles * TILE, x.shape
        if len(shape) != 2 or shape[1] != cols or not 1 <= shape[0] <= self.max_rows:
            raise ValueError(f"{name}: x must be [rows, {cols}] with 1 <= rows <= {self.max_rows}, got {list(shape)}")
        dtype = _DTYPES.get(x.dtype)
        if dtype is None or not x.is_cpu:
            raise ValueError(f"{name}: x must be a float32 or bfloat16 CPU tensor, got {x.dtype} on {x.device}")
        x = x.contiguous()
        out = torch.empty(shape[0], out_features, dtype=x.dtype)
        status = self._gemv(
            kind,
            codes.data_ptr(),
            scales.data_ptr(),
            x.data_ptr(),
            dtype,
            out.data_ptr(),
            dtype,
            shape[0],
            cols,
            out_features,
            torch.get_num_threads(),
        )
        if status:
            raise ValueError(f"{name}: the kernel refused the call ({ERRORS.get(status, status)})")
        return out


def q4_1_layout(codes: Tensor, scales: Tensor, lows: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel's Q4_1 layout of ``w = code * scale + low``: codes ``uint8 [out, in]`` (0..15), scales and
    lows ``[out, in / 32]``."""
    out, blocks = _check_shape("q4_1", codes, torch.uint8, scales, lows)
    steps = _steps(codes, out, blocks)  # [tiles, blocks, 8 steps, 8 rows x 4 inputs]
    packed = steps[:, :, :4] | (steps[:, :, 4:] << 4)
    header = torch.stack([_tiled_scales(scales, out, blocks), _tiled_scales(lows, out, blocks)], dim=2)
    return packed.reshape(out // TILE, blocks, 128).contiguous(), header.contiguous()


def q8_0_layout(codes: Tensor, scales: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel's Q8_0 layout of ``w = code * scale``: codes ``int8 [out, in]``, scales ``[out, in / 32]``."""
    out, blocks = _check_shape("q8_0", codes, torch.int8, scales)
    tiled = _steps(codes, out, blocks).reshape(out // TILE, blocks, 256).contiguous()
    return tiled, _tiled_scales(scales, out, blocks).contiguous()


def _steps(codes: Tensor, out: int, blocks: int) -> Tensor:
    """``[tiles, blocks, 8 steps, 32]``: per step, the 4 inputs of each of the tile's 8 rows, row by row."""
    grouped = codes.reshape(out // TILE, TILE, blocks, BLOCK // STEP, STEP)
    return grouped.permute(0, 2, 3, 1, 4).reshape(out // TILE, blocks, BLOCK // STEP, TILE * STEP)


def _tiled_scales(values: Tensor, out: int, blocks: int) -> Tensor:
    """``[out, blocks]`` to fp16 ``[tiles, blocks, 8]``: each tile's 8 rows side by side per block."""
    return values.to(torch.float16).reshape(out // TILE, TILE, blocks).transpose(1, 2)


def _check_shape(name: str, codes: Tensor, dtype: torch.dtype, *scales: Tensor) -> tuple[int, int]:
    """``(out, blocks)``, or a ValueError naming what does not fit the kernel."""
    if codes.dim() != 2 or codes.dtype != dtype:
        raise ValueError(f"{name}: codes must be {dtype} [out, in], got {codes.dtype} {list(codes.shape)}")
    out, cols = codes.shape
    if cols < BLOCK or cols % BLOCK or out < TILE or out % TILE:
        raise ValueError(
            f"{name}: the input size must be a positive multiple of {BLOCK} and the output size of {TILE}, "
            f"got {cols} -> {out}"
        )
    for values in scales:
        if values.shape != (out, cols // BLOCK):
            raise ValueError(
                f"{name}: scales must be [out, in / {BLOCK}] = [{out}, {cols // BLOCK}], got {list(values.shape)}"
            )
    return out, cols // BLOCK


def load_quant_gemv(flags: Sequence[str] = NATIVE_FLAGS, cc: str | None = None) -> QuantGemv:
    """Builds (once per machine, see ``build``) and loads the kernel; ``KernelUnavailable`` says why not."""
    library = load_library(SOURCE, flags, cc)
    if library.shoal_tile() != TILE:
        raise KernelUnavailable(
            f"{SOURCE.name} was built with tiles of {library.shoal_tile()} rows, the layout's are {TILE}"
        )
    return QuantGemv(library)
