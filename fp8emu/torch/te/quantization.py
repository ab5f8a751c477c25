"""TE's autocast and model-init context managers: ``autocast`` / ``fp8_autocast``, ``quantized_model_init`` /
``fp8_model_init``, ``get_default_recipe``.

As Transformer Engine's ``transformer_engine/pytorch/quantization.py`` (at d0067d0): the TE modules of
:mod:`fp8emu.torch.te` run FP8 / FP4 only inside an enabled ``autocast`` block and in high precision
outside one; the innermost block wins; ``fp8_autocast`` and ``fp8_model_init`` are TE's deprecated
names (they warn, as TE's do, and call the new ones).  One addition: ``gpu=``, the stack
(:func:`fp8emu.training.stack_names`) whose kernels the block's GEMMs emulate; left out it is inherited from
the enclosing block, else :data:`DEFAULT_GPU`.  The state is a ``contextvars.ContextVar`` (per thread).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import warnings
from typing import NamedTuple

import torch

from ...training import get_stack
from ..swap import check_combination
from .recipe import DelayedScaling, MXFP8BlockScaling, to_training_recipe

__all__ = ["autocast", "fp8_autocast", "quantized_model_init", "fp8_model_init", "get_default_recipe",
           "current_autocast", "current_model_init", "autocast_state", "DEFAULT_GPU"]

#: The stack a TE module's GEMMs emulate when no ``autocast(gpu=...)`` names one.
DEFAULT_GPU = "h100"


class AutocastState(NamedTuple):
    """One ``autocast`` block: ``enabled``, ``recipe`` (as given), ``training`` (the
    :mod:`fp8emu.training` recipe bound to ``stack``) and ``stack``."""

    enabled: bool
    recipe: object
    training: object
    stack: object


class ModelInitState(NamedTuple):
    """One ``quantized_model_init`` block."""

    enabled: bool
    recipe: object
    training: object
    stack: object
    preserve_high_precision_init_val: bool


_AUTOCAST = contextvars.ContextVar("fp8emu_te_autocast", default=None)
_MODEL_INIT = contextvars.ContextVar("fp8emu_te_model_init", default=None)


def current_autocast():
    """The innermost :class:`autocast` block's :class:`AutocastState`, or None outside every block.

    Examples
    --------
    >>> current_autocast() is None
    True
    >>> with autocast(recipe=DelayedScaling()):
    ...     current_autocast().training.name
    'te-delayed'
    """
    return _AUTOCAST.get()


def current_model_init():
    """The innermost :func:`quantized_model_init` block's :class:`ModelInitState`, or None.

    Examples
    --------
    >>> with quantized_model_init(recipe=DelayedScaling()):
    ...     current_model_init().enabled
    True
    """
    return _MODEL_INIT.get()


@contextlib.contextmanager
def autocast_state(state):
    """The block ``state`` (an :class:`AutocastState` from :func:`current_autocast`, or None: outside every
    block) in force inside, whatever block encloses this one.

    Examples
    --------
    >>> with autocast(recipe=DelayedScaling()):
    ...     saved = current_autocast()
    >>> with autocast_state(saved):
    ...     current_autocast().training.name
    'te-delayed'
    """
    token = _AUTOCAST.set(state)
    try:
        yield
    finally:
        _AUTOCAST.reset(token)


def get_default_recipe(gpu=None):
    """TE's default recipe for the stack: ``MXFP8BlockScaling`` where the GPU has MXFP8 tensor cores
    (``gpu="b200"``), else ``DelayedScaling`` (TE's ``get_default_fp8_recipe``).

    Examples
    --------
    >>> type(get_default_recipe()).__name__, type(get_default_recipe("b200")).__name__
    ('DelayedScaling', 'MXFP8BlockScaling')
    """
    S = get_stack(gpu if gpu is not None else DEFAULT_GPU)
    return MXFP8BlockScaling() if S.name == "b200" else DelayedScaling()


def _bind(recipe, gpu, outer):
    S = get_stack(gpu if gpu is not None else (outer.stack if outer is not None else DEFAULT_GPU))
    R = recipe if recipe is not None else get_default_recipe(S)
    return R, check_combination(to_training_recipe(R), S), S


#: Why a block cannot be traced (what ``torch.compile(..., fullgraph=True)`` reports; fp8emu.torch.autocast says the
#: same of its own block).  Dynamo's words were "does not know how to trace method `get` of class `ContextVar` ...
#: Please report an issue to PyTorch", which named fp8emu's code, not what the user can do.
_UNTRACEABLE = ("fp8emu.torch.te.autocast keeps its state in a contextvars.ContextVar, which torch.compile cannot "
                "trace (a graph break): enter the block outside the compiled function (the TE modules read it when "
                "they run, eagerly), or compile without fullgraph=True")
_eager = torch.compiler.disable(reason=_UNTRACEABLE)


class autocast:
    """TE's ``autocast(enabled, calibrating, recipe, amax_reduction_group)``, plus ``gpu=``.

    Parameters
    ----------
    enabled : bool
        False: the TE modules compute in high precision (plain torch math) inside the block.
    calibrating : bool
        Must be False (TE's calibration, amax statistics collected in high precision, is not emulated).
    recipe : recipe object or str, optional
        A :mod:`fp8emu.torch.te.recipe` object (TE's), an fp8emu TE recipe or its name; None:
        :func:`get_default_recipe`.
    amax_reduction_group : optional
        Accepted and ignored: amaxes are reduced across processes; one process has nothing to reduce.
    gpu : str or Stack, keyword-only, optional
        The stack whose kernels the GEMMs emulate.

    Examples
    --------
    >>> import torch
    >>> import fp8emu.torch.te as te
    >>> layer = te.Linear(32, 32)
    >>> x = torch.randn(16, 32)
    >>> with te.autocast(enabled=True, recipe=te.recipe.Float8CurrentScaling()):
    ...     y = layer(x)
    >>> torch.equal(y, layer(x))      # outside the block: high precision
    False
    """

    @_eager
    def __init__(self, enabled=True, calibrating=False, recipe=None, amax_reduction_group=None, _graph=False, *,
                 gpu=None):
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast: enabled must be True or False, got {enabled!r}")
        if calibrating is not False:
            # the value given, not "calibrating=True": 0, None or "False" were reported as True
            raise ValueError(f"autocast: calibrating={calibrating!r} is not emulated (True: amax statistics gathered "
                             "in high precision); accepted: False")
        self._args = (enabled, recipe, gpu)
        self._token = None
        outer = _AUTOCAST.get()
        R, T, S = _bind(recipe, gpu, outer)     # errors at construction, as TE's check_recipe_support
        self._state = AutocastState(enabled, R, T, S)

    @_eager
    def __enter__(self):
        if self._token is not None:
            raise RuntimeError("autocast context manager cannot be entered more than once concurrently")
        self._token = _AUTOCAST.set(self._state)
        return self

    @_eager
    def __exit__(self, *exc):
        _AUTOCAST.reset(self._token)
        self._token = None

    def __call__(self, fn):
        """As a decorator (TE's ``autocast`` is a ``contextlib.contextmanager``, which decorates): ``fn`` runs
        inside the block, each call on its own (a recursive or concurrent call too).  It was Python's
        "'autocast' object is not callable"."""
        if not callable(fn):
            raise TypeError(f"autocast: as a decorator it takes a function, got {type(fn).__name__}")
        state = self._state

        @functools.wraps(fn)
        def inside(*args, **kwargs):
            with autocast_state(state):
                return fn(*args, **kwargs)
        return inside


def fp8_autocast(enabled=True, calibrating=False, fp8_recipe=None, fp8_group=None, _graph=False, *, gpu=None):
    """TE's deprecated ``fp8_autocast``: warns (``DeprecationWarning``, as TE) and returns :class:`autocast`.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     with fp8_autocast(enabled=True, fp8_recipe=DelayedScaling()):
    ...         current_autocast().enabled
    True
    """
    warnings.warn("fp8_autocast is deprecated (as in Transformer Engine); use autocast(enabled=..., recipe=...)",
                  DeprecationWarning, stacklevel=2)
    return autocast(enabled=enabled, calibrating=calibrating, recipe=fp8_recipe, amax_reduction_group=fp8_group,
                    _graph=_graph, gpu=gpu)


@contextlib.contextmanager
def quantized_model_init(enabled=True, recipe=None, preserve_high_precision_init_val=False, *, gpu=None):
    """TE's ``quantized_model_init``: TE modules built inside hold their weights as FP8 / FP4 primary weights.

    Each weight keeps its float32 values as the ``nn.Parameter`` the optimizer updates (the master
    weight, as Megatron-LM's distributed optimizer keeps it) and a quantized copy (codes and scales)
    that the forward and backward GEMMs read; the copy is refreshed from the master weight when it
    changed (after an optimizer step) or by :func:`fp8emu.torch.te.refresh_primary_weights`.
    Outside ``autocast`` the module computes with the dequantized copy, as TE's FP8 parameters do.
    ``preserve_high_precision_init_val`` is accepted (the master weight already holds the initial values).

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> with te.quantized_model_init(recipe=te.recipe.Float8CurrentScaling()):
    ...     layer = te.Linear(32, 32)
    >>> layer.primary_weights
    True
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"quantized_model_init: enabled must be True or False, got {enabled!r}")
    R, T, S = _bind(recipe, gpu, _AUTOCAST.get())
    token = _MODEL_INIT.set(ModelInitState(enabled, R, T, S, bool(preserve_high_precision_init_val)))
    try:
        yield
    finally:
        _MODEL_INIT.reset(token)


@contextlib.contextmanager
def fp8_model_init(enabled=True, recipe=None, preserve_high_precision_init_val=False, *, gpu=None):
    """TE's deprecated ``fp8_model_init``: warns and runs :func:`quantized_model_init`.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     with fp8_model_init(enabled=True):
    ...         current_model_init().training.name
    'te-delayed'
    """
    warnings.warn("fp8_model_init is deprecated (as in Transformer Engine); use quantized_model_init(...)",
                  DeprecationWarning, stacklevel=3)
    with quantized_model_init(enabled, recipe, preserve_high_precision_init_val, gpu=gpu):
        yield
