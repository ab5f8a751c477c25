"""The version of fp8emu: the one place it is written.

setuptools reads it into the package metadata (``[tool.setuptools.dynamic]`` in
``pyproject.toml``), ``fp8emu --version`` prints it and the documentation shows it.

Examples
--------
>>> import fp8emu
>>> fp8emu.__version__ == __version__
True
>>> __version__.count(".")
2
"""

__all__ = ["__version__"]

#: The version of fp8emu; the package metadata, the documentation and ``fp8emu --version`` read it.
__version__ = "0.1.0"
