"""Sphinx configuration of the fp8emu documentation (build: ``bash .ci/docs`` or ``sphinx-build docs docs/_build/html``)."""

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import fp8emu  # noqa: E402

project = "fp8emu"
author = "the fp8emu authors"
copyright = "the fp8emu authors, Apache-2.0"
# The one version (fp8emu.__version__), also in the package metadata and `fp8emu --version`.
version = release = fp8emu.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",
    "fp8emu_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_generated", "evidence", "examples/README.rst", "examples/*/README.rst",
                    "**.ipynb_checkpoints", "gallery/*.ipynb", "gallery/*.py", "gallery/*.zip", "gallery/*.json"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

autosummary_generate = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
autodoc_mock_imports = []
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
numpydoc_xref_param_type = False

# The examples in the docstrings are doctests (sphinx.ext.doctest runs them with `-b doctest`,
# tests/test_docs.py with the suite).
doctest_global_setup = "import numpy as np\nimport fp8emu"

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "gallery",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "fp8emu_gallery.FigureOrder",
    "matplotlib_animations": False,
    "image_scrapers": ("fp8emu_gallery.figure_scraper",),
    "reset_modules": (),
    "show_memory": False,
    "plot_gallery": os.environ.get("FP8EMU_DOCS_GALLERY", "True"),
}

html_theme = "pydata_sphinx_theme"
html_title = f"fp8emu {release}"
html_static_path = ["_static"]
# Wide code blocks scroll sideways instead of being cut off; the copy button leaves out prompts and outputs.
html_css_files = ["fp8emu.css"]
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "navbar_end": ["navbar-icon-links"],
    "secondary_sidebar_items": ["page-toc"],
    "check_switcher": False,
}
html_sidebars = {"index": [], "getting-started": [], "evidence": [], "performance": [], "changelog": []}
html_show_sourcelink = False
html_copy_source = False
# No web fonts, analytics or other requests outside the built site: the pages work offline.
html_last_updated_fmt = None
