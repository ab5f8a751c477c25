"""
Codec throughput against ml_dtypes
==================================

Encode and decode throughput of fp8emu (pure NumPy) and of ml_dtypes' C++ casts, timed side by
side in one process over a sweep of array sizes (one thread). A measurement, so this page shows
the committed file; remake it on your machine with::

    python3 benchmarks/bench_codec.py          # the table, the size sweep and this figure

The figures and the peer's version are in ``benchmarks/RESULTS.md`` (see the performance page).
"""

from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
png = matplotlib.image.imread(root / "figures" / "codec_throughput.png")
fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
ax = fig.add_axes((0, 0, 1, 1))
ax.imshow(png)
ax.set_axis_off()
