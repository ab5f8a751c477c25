"""
Bias of the mean over N draws (gradient study)
==============================================

The error of the mean over N draws of a recipe's stochastic rounding, against N on log-log axes, with the err(1)/sqrt(N) reference dotted: the quantized output gradient alone (left) and the wgrad GEMM (right), findings (a) and (f).
The committed file from the study in ``docs/data/grad-study``; remake it with
``fp8emu grad-study`` (the command is in ``docs/data/grad-study/provenance.csv``; a rerun into the
same folder redraws the report from its cell files), then copy ``figures/bias_vs_n.png`` from the output
folder to ``figures/grad_study_bias_vs_n.png``.  The gradient study guide explains what it shows.
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "grad_study_bias_vs_n.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
