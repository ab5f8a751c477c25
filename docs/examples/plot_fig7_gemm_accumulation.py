"""
Figure 7: GEMM accumulation
===========================

GEMM accumulation (8×K by K×8, positive e4m3fn operands, so the sum grows with K; max relative error
against the exact sum): with Hopper's fast accumulation (``hopper-fast``, ``use_fast_accum=True``) the error
grows with K, 2.3·10⁻³ at K = 256 to 0.077 at K = 4096 (at K = 16384 cuBLAS's 6-way split-K brings it back
to 0.044), while ``hopper`` (``use_fast_accum=False``) stays at 6–8·10⁻⁴ and a float32 running sum (``fp32``) at ≤ 2·10⁻⁶: the DeepSeek-V3 observation, on the CPU.

The committed file is ``figures/fig7_gemm_accumulation.png``; ``fp8emu figures --only fig7_gemm_accumulation`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_gemm_accumulation()
