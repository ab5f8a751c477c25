"""
Figure 5: Delayed vs current scaling
====================================

Delayed vs current scaling (``DelayedScaling``, history 16) on a tensor whose amax drifts upward and
spikes: the delayed scale lags, so every spike and every new high overflows (6307 elements over 300 steps
against none for current scaling, counted as elements whose scaled value rounds beyond 448, i.e. exceeds
464, under the cast's round-to-nearest-even); after a spike the history keeps the scale small for 16 steps.

The committed file is ``figures/fig5_delayed_scaling.png``; ``fp8emu figures --only fig5_delayed_scaling`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_delayed_scaling()
