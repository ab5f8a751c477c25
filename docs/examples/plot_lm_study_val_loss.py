"""
Validation loss of the language-model study
===========================================

Validation loss (nats per byte) of the study's byte-level GPT against training step: the mean over seeds of each recipe on each GPU stack, with a band from the lowest to the highest seed, beside the fp32 and bf16 baselines (five seeds each).
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
png = matplotlib.image.imread(root / "figures" / "lm_study_val_loss.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
