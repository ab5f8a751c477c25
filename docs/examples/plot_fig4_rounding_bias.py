"""
Figure 4: Rounding bias
=======================

Rounding bias. Round-toward-zero loses half an ulp on average (measured −0.475 ulp over [1, 2));
RNE is unbiased on average but not per value; stochastic rounding is unbiased per value: its mean \|bias\|
is 0.28 ulp with 1 random bit and below 0.01 ulp from 6 bits on, at the price of a variance f(1−f) ulp².

The committed file is ``figures/fig4_rounding_bias.png``; ``fp8emu figures --only fig4_rounding_bias`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_rounding_bias()
