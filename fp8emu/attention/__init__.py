"""FP8 attention as a kernel computes it: :mod:`fp8emu.attention.emulate` (every public name is here too).

The package by concept: :mod:`~fp8emu.attention.recipes` (what a kernel does, step by step, and the
named kernels), :mod:`~fp8emu.attention.operands` (Q, K, V quantized with their descales, and the GEMM
steps), :mod:`~fp8emu.attention.emulate` (the blocked forward pass), :mod:`~fp8emu.attention.report`
(its result and diagnostics) and :mod:`~fp8emu.attention.reference` (float64 attention to measure it by).

The study over it (context lengths, promotion, pre-scale) is :mod:`fp8emu.lab.attention`.
"""

from __future__ import annotations

from . import emulate
from .emulate import *  # noqa: F401,F403 (the public API, as emulate lists it)

__all__ = list(emulate.__all__)
