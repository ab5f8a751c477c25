"""Delayed scaling (Transformer Engine ``DelayedScaling``) and the recipe's format choices."""

from __future__ import annotations

import numpy as np

from .tensor import (
    F32, FLT_MAX, ScaledTensor, amax_nan_ignoring, as_f32, as_format, given_scale, int_arg, reciprocal,
    scaled_max, scaled_quantize,
)

__all__ = ["HYBRID", "recipe_formats", "DelayedScaling"]

#: Transformer Engine's ``Format.HYBRID``: E4M3 in the forward pass, E5M2 for gradients.
HYBRID = {"forward": "e4m3fn", "backward": "e5m2"}


def recipe_formats(fp8_format="HYBRID") -> dict:
    """Formats of Transformer Engine's ``Format`` choices.

    Parameters
    ----------
    fp8_format : {"E4M3", "E5M2", "HYBRID"}
        ``"HYBRID"``: E4M3 forward (activations, weights), E5M2 backward
        (gradients).

    Returns
    -------
    dict
        ``{"forward": name, "backward": name}``.

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.recipe_formats("HYBRID")
    {'forward': 'e4m3fn', 'backward': 'e5m2'}
    >>> fp8emu.recipe_formats("E4M3")["backward"]
    'e4m3fn'
    """
    if not isinstance(fp8_format, str):
        raise TypeError(f"fp8_format must be a string, got {fp8_format!r}")
    key = fp8_format.upper()
    table = {"E4M3": {"forward": "e4m3fn", "backward": "e4m3fn"},
             "E5M2": {"forward": "e5m2", "backward": "e5m2"},
             "HYBRID": dict(HYBRID)}
    if key not in table:
        raise ValueError(f"unknown fp8_format {fp8_format!r}; accepted: E4M3, E5M2, HYBRID")
    return dict(table[key])


class DelayedScaling:
    """Per-tensor delayed scaling (Transformer Engine ``DelayedScaling``).

    One object per tensor.  Each :meth:`quantize` call

    1. casts ``x`` with the current ``scale`` (``fl32(x * scale)``, saturating
       RNE cast; ``scale_inv = fl32(1/scale)``);
    2. records ``amax = max|x|`` (NaN ignored) in ``amax_history[0]``;
    3. updates the scale as Transformer Engine's ``amax_and_scale_update``
       kernel: ``amax_r = max(history)`` (NaN ignored) for ``"max"``, or
       ``history[0]`` for ``"most_recent"``; the history is rolled one step
       toward the front (``new[i] = old[i+1]``, ``new[-1] = old[0]``) and
       ``new[0] = 0``; ``scale = fl32(fl32(fp8_max * 2**-margin) / amax_r)``
       if ``amax_r`` is finite and > 0, otherwise the previous scale is
       kept; an infinite scale becomes ``FLT_MAX``.

    The first call uses scale 1 (the initial state).

    Parameters
    ----------
    fmt : str or Format
        Element format (see :func:`recipe_formats` for E4M3/E5M2/HYBRID).
    amax_history_len : int, keyword-only
        Length of the history (>= 1).
    amax_compute_algo : {"max", "most_recent"}, keyword-only
    margin : int, keyword-only

    Attributes
    ----------
    scale, scale_inv : numpy.float32
    amax_history : numpy.ndarray of float32, shape (amax_history_len,)

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> ds = fp8emu.DelayedScaling("e4m3fn", amax_history_len=4)
    >>> float(ds.quantize(np.array([2.0, -7.0])).scale)     # first step: scale 1
    1.0
    >>> float(ds.scale), ds.amax_history.tolist()           # 448 / 7, history rolled
    (64.0, [0.0, 0.0, 0.0, 7.0])
    >>> ds.quantize(np.array([3.5])).dequantize().tolist()
    [3.5]
    """

    def __init__(self, fmt, *, amax_history_len=1024, amax_compute_algo="max", margin=0):
        self.fmt = as_format(fmt)
        self.amax_history_len = int_arg(amax_history_len, "amax_history_len", minimum=1)
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"unknown amax_compute_algo {amax_compute_algo!r}; "
                             "accepted: 'max', 'most_recent'")
        self.amax_compute_algo = amax_compute_algo
        self.margin = int_arg(margin, "margin")
        scaled_max(self.fmt, self.margin)   # range check now rather than at the first update
        self.amax_history = np.zeros(self.amax_history_len, dtype=np.float32)
        self.scale = F32(1)

    @property
    def scale(self) -> np.float32:
        """The scale of the next :meth:`quantize` (float32, finite, > 0, with a finite reciprocal).

        Setting it also sets :attr:`scale_inv` to ``fl32(1 / scale)``; a value that is not
        finite and positive in float32, or whose reciprocal overflows, raises ValueError.
        """
        return self._scale

    @scale.setter
    def scale(self, value):
        s = F32(given_scale(value, (), "DelayedScaling.scale")[()])
        self._scale = s
        self._scale_inv = F32(reciprocal(s)[()])

    @property
    def scale_inv(self) -> np.float32:
        """``fl32(1 / scale)`` (read-only: set :attr:`scale`)."""
        return self._scale_inv

    def quantize(self, x) -> ScaledTensor:
        """Cast ``x`` with the current scale, then record its amax and update.

        Parameters
        ----------
        x : array_like

        Returns
        -------
        ScaledTensor
            Per-tensor, with the scale in force before this call's update.
        """
        xf = as_f32(x)
        out = scaled_quantize(xf, self.fmt, (), np.asarray(self.scale, dtype=np.float32),
                               recipe="delayed")
        self.amax_history[0] = np.fmax(self.amax_history[0], amax_nan_ignoring(xf, None))
        self._update()
        return out

    def _update(self):
        h = self.amax_history
        if self.amax_compute_algo == "max":
            amax = F32(np.fmax.reduce(h))
        else:
            amax = h[0]
        self.amax_history = np.concatenate([[F32(0)], h[2:], h[:1]]).astype(np.float32) \
            if len(h) > 1 else np.zeros(1, dtype=np.float32)
        if np.isfinite(amax) and amax > 0:
            with np.errstate(over="ignore"):
                s = F32(scaled_max(self.fmt, self.margin) / amax)
            self.scale = FLT_MAX if np.isinf(s) else s

    def __repr__(self):
        return (f"DelayedScaling({self.fmt.name!r}, amax_history_len={self.amax_history_len}, "
                f"amax_compute_algo={self.amax_compute_algo!r}, margin={self.margin}, "
                f"scale={float(self.scale)!r})")
