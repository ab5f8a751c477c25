"""
Per-layer diagnostics over training
===================================

fp8emu.torch's diagnostics of the te-delayed@h100 run (seed 0): per layer, pass and operand, the GEMM's relative error against float64, the fractions underflowed and saturated, and the amax, averaged over each evaluation interval.
The committed file from the study in ``docs/data/lm-study``; remake it with
``fp8emu train-study`` and the command in ``docs/data/lm-study/provenance.csv``
(--report-only redraws it from the run files), then copy ``figures/`` from the output folder.
The language-model study guide explains what it shows.
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "lm_study_diagnostics.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
