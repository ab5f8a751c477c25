"""The user's own data for the lab: arrays, framework tensors, or a checkpoint tensor by name.

Every lab function that takes the user's data (the ``figure_data_*`` figures of
:mod:`fp8emu.lab.plots` and :mod:`fp8emu.lab.attention`, the sweeps of
:mod:`fp8emu.lab.analysis` that accept arrays) turns it into a float64 NumPy
array with :func:`load_data`:

* NumPy and ml_dtypes arrays, torch / JAX tensors (any device, bfloat16 and
  float8 included), lists: through :func:`fp8emu.interop.to_numpy`;
* a tensor of a checkpoint by name: ``load_data("w", checkpoint="model.safetensors")``,
  read through :mod:`fp8emu.readers` (``.safetensors`` files, folders of
  shards, ``.npz`` and ``.npy`` files, as :func:`fp8emu.lab.study.discover`
  finds them).

The caller's array is never modified (a float64 copy is returned), and bad input
is one error naming what was wrong and what is accepted.

Examples
--------
>>> import numpy as np
>>> load_data(np.array([1.0, 2.0], np.float32)).dtype
dtype('float64')
>>> load_data([1.0, float("nan")])
Traceback (most recent call last):
    ...
ValueError: data holds 1 NaN/Inf value(s) of 2; the lab measures finite inputs (drop or replace them first)
"""

from __future__ import annotations

import os

import numpy as np

from ..interop import to_numpy
from .study import discover

__all__ = ["load_data", "checkpoint_names"]


def checkpoint_names(checkpoint) -> list:
    """Names of the floating-point tensors of a checkpoint (what :func:`load_data` can read).

    Examples
    --------
    >>> from fp8emu.lab.study import demo_checkpoint
    >>> "activations.layers.0.mlp_input" in checkpoint_names(demo_checkpoint())
    True
    """
    refs, _ = discover(checkpoint)
    return [r.name for r in refs]


def _from_checkpoint(name, checkpoint, what):
    if not isinstance(name, str):
        raise TypeError(f"{what}: with checkpoint= given, {what} must be the name of one of its tensors "
                        f"(a str), got {type(name).__name__}")
    refs, _ = discover(checkpoint)
    for ref in refs:
        if ref.name == name:
            return ref.read()
    names = [r.name for r in refs]
    shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    raise ValueError(f"{what}: {os.fspath(checkpoint)} holds no floating-point tensor named {name!r}; "
                     f"it holds: {shown}")


def load_data(data, *, checkpoint=None, what="data") -> np.ndarray:
    """The user's data as a new float64 array.

    Parameters
    ----------
    data : array_like, framework tensor, or str
        Real numbers (float, integer, bfloat16, float8 ... arrays; torch or JAX
        tensors; lists), or, with ``checkpoint``, the name of one of its tensors.
    checkpoint : str or Path, optional, keyword-only
        A ``.safetensors``/``.npz``/``.npy`` file or a folder of shards to read ``data`` from.
    what : str, keyword-only
        How the data is called in error messages (``"a"``, ``"q"`` ...).

    Returns
    -------
    numpy.ndarray
        float64, same shape, a copy.

    Raises
    ------
    TypeError
        A string or path given without ``checkpoint``; a non-numeric array (bool,
        complex, strings, objects).
    ValueError
        An empty array, NaN or Inf values, a name the checkpoint does not hold.

    Examples
    --------
    >>> from fp8emu.lab.study import demo_checkpoint
    >>> load_data("activations.layers.0.mlp_input", checkpoint=demo_checkpoint()).shape
    (128, 256)
    >>> load_data("mlp.layers.0.weight")
    Traceback (most recent call last):
        ...
    TypeError: data is the string 'mlp.layers.0.weight': to read a checkpoint tensor by name, pass checkpoint=PATH too
    """
    if checkpoint is not None:
        arr = _from_checkpoint(data, checkpoint, what)
    elif isinstance(data, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} is the {'string' if isinstance(data, str) else type(data).__name__} "
                        f"{data!r}: to read a checkpoint tensor by name, pass checkpoint=PATH too")
    else:
        arr = to_numpy(data, what=what)
    dt = arr.dtype
    if dt.kind not in "fiu" and not dt.type.__module__.startswith("ml_dtypes"):
        raise TypeError(f"{what} must hold real numbers (float, integer, bfloat16 or float8 values), "
                        f"got dtype {dt}")
    out = np.array(arr, dtype=np.float64)
    if out.size == 0:
        raise ValueError(f"{what} is empty (shape {out.shape}); the lab needs at least one value")
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if bad:
        raise ValueError(f"{what} holds {bad} NaN/Inf value(s) of {out.size}; the lab measures finite inputs "
                         "(drop or replace them first)")
    return out
