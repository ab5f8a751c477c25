"""
Figure 8: FP8 training, measured
================================

``fp8emu train-demo`` trains the same MLP (32, 128, 128, 10; ReLU; SGD with momentum) in float32
and with every linear layer in emulated FP8: the HYBRID recipe (E4M3 forward, E5M2 gradients), one
``DelayedScaling`` per tensor role and layer, FP8 GEMMs on the codes by ``scaled_mm``. The loss
curves of the two runs; the numbers behind them are in the numerics-lab guide, and the test suite
reruns them.

The committed file is ``figures/fig8_training.png``; ``fp8emu figures --only fig8_training`` writes it
(all of them: ``fp8emu figures --out figures/``). This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_training()
