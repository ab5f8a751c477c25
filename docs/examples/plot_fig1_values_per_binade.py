"""
Figure 1: Range and precision
=============================

Range and precision. Each format's values on a log axis (left) and how many fall in each binade
(right): mantissa bits set the density, exponent bits the span.

The committed file is ``figures/fig1_values_per_binade.png``; ``fp8emu figures --only fig1_values_per_binade`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_values_per_binade()
