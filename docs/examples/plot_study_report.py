"""
A study report, as Chromium renders it
======================================

The top of ``report.html`` that ``fp8emu study --demo`` writes for the demo checkpoint (provenance,
conclusion, the recipes grouped by family, what each column means), rendered by headless Chromium. A screenshot, so this page shows the
committed file; remake it with::

    python3 tools/make_report_screenshot.py    # runs the demo study, checks every figure loaded

The study guide explains what it shows.
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "study_report.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
