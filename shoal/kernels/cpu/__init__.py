"""CPU kernels in C, built on the machine that runs them: quantized weights times a few rows (``quant_gemv``)."""

from shoal.kernels.cpu.quant_gemv import KernelUnavailable, QuantGemv, load_quant_gemv, q4_1_layout, q8_0_layout

__all__ = ["KernelUnavailable", "QuantGemv", "load_quant_gemv", "q4_1_layout", "q8_0_layout"]
