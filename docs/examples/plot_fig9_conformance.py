"""
Figure 9: Conformance
=====================

Conformance. How each recorded H200 conversion path (reproduced bit-exactly by its profile) departs
from the OCP spec over all 2^32 float32 inputs, by kind of difference (from ``fp8emu.conformance.report()``).

The committed file is ``figures/fig9_conformance.png``; ``fp8emu figures --only fig9_conformance`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_conformance()
