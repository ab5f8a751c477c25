"""sphinx-gallery helpers: an image scraper for object-API figures and the gallery's order.

fp8emu's figure functions build :class:`matplotlib.figure.Figure` objects without pyplot (they
never switch the caller's backend), so sphinx-gallery's matplotlib scraper, which looks at
pyplot's figures, does not see them.  :func:`figure_scraper` saves every ``Figure`` that an
example block leaves in its globals, once.
"""

from __future__ import annotations

import re

def figure_scraper(block, block_vars, gallery_conf, **kwargs):
    """Save the new Figure objects of the example's globals; return their reST."""
    from matplotlib.figure import Figure
    from sphinx_gallery.scrapers import figure_rst

    paths = []
    for value in list(block_vars["example_globals"].values()):
        if isinstance(value, Figure) and not getattr(value, "_fp8emu_gallery_saved", False):
            value._fp8emu_gallery_saved = True
            path = next(block_vars["image_path_iterator"])
            # The committed figures' own settings (fp8emu.lab.plots.save_figures).
            value.savefig(path, dpi=100, bbox_inches="tight")
            paths.append(path)
    return figure_rst(paths, gallery_conf["src_dir"])


class FigureOrder:
    """Gallery order: the numbered figures by number, then the rest by name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        m = re.match(r"plot_fig(\d+)_", str(filename))
        return (0, int(m.group(1)), "") if m else (1, 0, str(filename))

    def __repr__(self):
        return "FigureOrder"
