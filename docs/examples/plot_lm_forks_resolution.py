"""
Two designs for the language-model study: from scratch and forked from one checkpoint
=====================================================================================

Each recipe x stack pair's gap to bf16, paired by seed, with its 95 % Student-t interval: on the left
trained from scratch (``docs/data/lm-study``, each run's own quantized forward), on the right forked from
one float32 checkpoint and evaluated in float32 on the whole validation split (``docs/data/lm-forks``).
Drawn here from the committed CSV files by :func:`fp8emu.lab.lm_forks.figure_resolution`;
``figures/lm_forks_resolution.png`` is the same figure, written by
``python docs/examples/plot_lm_forks_resolution.py --save``.  The language-model study guide explains it.
"""

import sys
from pathlib import Path

from fp8emu.lab import lm_forks

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
fig = lm_forks.figure_resolution(root / "docs" / "data" / "lm-forks", root / "docs" / "data" / "lm-study")
if "--save" in sys.argv:
    fig.savefig(root / "figures" / "lm_forks_resolution.png", dpi=90)
