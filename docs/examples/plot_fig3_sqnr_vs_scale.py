"""
Figure 3: Error vs dynamic range
================================

Error vs dynamic range. Unscaled, a format only reaches its SQNR (e4m3fn ≈ 31.5 dB, e5m2 ≈ 25.5 dB,
e3m4 ≈ 37.5 dB on Gaussian data) in a window of input scales; one per-tensor scale (amax → max) makes it
independent of scale. e2m1fn (FP4) needs finer scaling: its per-tensor SQNR is only 18 dB (Gaussian),
9 dB (Student-t).

The committed file is ``figures/fig3_sqnr_vs_scale.png``; ``fp8emu figures --only fig3_sqnr_vs_scale`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_sqnr_vs_scale()
