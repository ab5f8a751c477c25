"""FP8 attention as a kernel computes it: :func:`attention` (:mod:`fp8emu.attention.emulate`); every public name
of the package's modules is here.

The package by concept: :mod:`~fp8emu.attention.recipes` (what a kernel does, step by step, and the
named kernels), :mod:`~fp8emu.attention.operands` (Q, K, V quantized with their descales, and the GEMM
steps), :mod:`~fp8emu.attention.emulate` (the blocked forward pass), :mod:`~fp8emu.attention.report`
(its result and diagnostics) and :mod:`~fp8emu.attention.reference` (float64 attention to measure it by).

The study over it (context lengths, promotion, pre-scale) is :mod:`fp8emu.lab.attention`.
"""

from __future__ import annotations

from .emulate import attention
from .operands import quantize_qkv
from .recipes import (
    RECIPES, AttentionRecipe, exp2_f32, fa3_fp8, fa4_sm100_fp8, fa4_sm100_fp8_pre2717, flashinfer_fp8_decode,
    flashinfer_fp8_prefill, get_recipe, off_recipe, triton_tutorial_fp8, vllm_fp8_kv_decode,
)
from .reference import reference_attention
from .report import AttentionReport, AttentionResult

__all__ = ["AttentionRecipe", "AttentionResult", "AttentionReport", "RECIPES", "get_recipe", "attention",
           "reference_attention", "exp2_f32", "quantize_qkv", "off_recipe", "fa3_fp8", "fa4_sm100_fp8",
           "fa4_sm100_fp8_pre2717", "flashinfer_fp8_prefill", "flashinfer_fp8_decode", "vllm_fp8_kv_decode",
           "triton_tutorial_fp8"]
