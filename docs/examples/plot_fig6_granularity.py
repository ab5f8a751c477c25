"""
Figure 6: Granularity with outliers
===================================

Granularity with outliers (activations with 4 outlier channels × 100 and a per-row magnitude spread):
row-wise scaling wins for e4m3 (36.2 dB vs 32.8 dB per-tensor); the power-of-two 1×128 / 128×128 and
MX32 scales give 30.0–31.9 dB, since a floating-point format's SQNR hardly depends on the scale and a
power-of-two scale gives up part of the range. In 4 bits, NVFP4 (E4M3 scale per 16 values, 27.0 dB)
beats MXFP4 (E8M0 scale per 32, 17.3 dB).

The committed file is ``figures/fig6_granularity.png``; ``fp8emu figures --only fig6_granularity`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_granularity()
