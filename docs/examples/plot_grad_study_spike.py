"""
Around an amax spike (gradient study)
=====================================

The fprop error and the saturated / underflowed fractions of the input per step, delayed against current scaling, with an amax spike injected at the marked step, finding (e).
The committed file from the study in ``docs/data/grad-study``; remake it with
``fp8emu grad-study`` (the command is in ``docs/data/grad-study/provenance.csv``; a rerun into the
same folder redraws the report from its cell files), then copy ``figures/spike.png`` from the output
folder to ``figures/grad_study_spike.png``.  The gradient study guide explains what it shows.
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "grad_study_spike.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
