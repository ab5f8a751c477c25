"""
Figure 2: Relative error is a saw-tooth
=======================================

Relative error is a saw-tooth, at most 2^-(m+1) in the normal range and rising in the subnormals
(to 100 % below half the smallest subnormal); e4m3fn (≤ 6.25 %) against e5m2 (≤ 12.5 %) and bfloat16 (≤ 0.39 %).

The committed file is ``figures/fig2_relative_error.png``; ``fp8emu figures --only fig2_relative_error`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_relative_error()
