"""
Figure 11: FP8 attention error
==============================

The attention study (:func:`fp8emu.lab.attention.attention_study`): RMS relative error of the output O of
the FlashAttention-3 FP8 recipe against float64 attention, (a) versus context length from 1K to 128K keys,
(b) versus the P·V promotion interval, (c) with and without P's max-offset pre-scale and saturation, and
(d) per-tensor versus per-head descales, on Gaussian and outlier-channel Q/K. The full study takes tens
of minutes, so this page shows the committed file; remake it with::

    fp8emu figures --only fig11_attention --out figures/

or a smaller version in seconds with ``fp8emu attention-study --contexts 1024,4096 --figure fig.png``.
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "fig11_attention.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
