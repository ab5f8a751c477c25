"""
Figure 10: Block-scaled GEMM error
==================================

Block-scaled GEMM error against the exact product on heavy-tailed data: MXFP8, MXFP6, MXFP4 and NVFP4 operands, with and without NVFP4's random Hadamard transform (``fp8emu.gemm.block_scaled_mm``).

The committed file is ``figures/fig10_block_scaled_gemm.png``; ``fp8emu figures --only fig10_block_scaled_gemm`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_block_scaled_gemm()
