"""
The layers of fp8emu
====================

The package's layers, bottom up, with the modules and packages of each: a module imports only its
own layer or those below it (``tests/test_architecture.py`` checks every import).  Drawn from the
``LAYERS`` table of that test, so this page shows the committed file; remake it with::

    python3 tools/make_architecture_figure.py

The architecture page has one paragraph per layer.
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "architecture.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
