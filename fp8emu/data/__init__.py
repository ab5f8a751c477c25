"""Package data: the GPU tables recorded on an NVIDIA H200.

The recordings (``golden/*.rle`` run-length cast and decode tables,
``golden/*.npz`` probes and ``torch._scaled_mm`` cases) are byte-identical
copies of the project's ground truth.  They ship inside the wheel and the
sdist and are read through :mod:`importlib.resources`, never from the source
tree.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["golden_dir", "golden_path"]


def golden_dir() -> Path:
    """Folder of the recorded H200 tables shipped with the package.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    FileNotFoundError
        If the installation lacks the recordings (a broken install).

    Examples
    --------
    >>> from fp8emu.data import golden_dir
    >>> (golden_dir() / "scaled_mm_dev.npz").is_file()
    True
    """
    folder = resources.files(__name__).joinpath("golden")
    path = Path(str(folder))
    if not path.is_dir():
        raise FileNotFoundError(f"the recorded tables are missing from this installation ({path})")
    return path


def golden_path(name: str) -> Path:
    """Path of one recorded file, e.g. ``"scaled_mm_dev.npz"``.

    Raises
    ------
    FileNotFoundError
        If there is no recording of that name (the message lists them).

    Examples
    --------
    >>> from fp8emu.data import golden_path
    >>> golden_path("torch_f32_e4m3fn.rle").name
    'torch_f32_e4m3fn.rle'
    """
    path = golden_dir() / name
    if not path.is_file():
        have = ", ".join(sorted(p.name for p in golden_dir().iterdir()))
        raise FileNotFoundError(f"no recording named {name!r}; available: {have}")
    return path
