"""``autocast``: switch emulated layers on, off or to another recipe / stack for a block of code.

In the style of Transformer Engine's ``fp8_autocast``: outside every block the layers
:func:`fp8emu.torch.emulate` prepared run FP8 (the default, as torchao's ``Float8Linear``) or, made with
``emulate(..., autocast_only=True)``, as the plain ``nn.Linear`` they replaced (TE's rule: FP8 only
inside ``fp8_autocast``); inside ``with autocast()`` they run FP8, inside ``with autocast(enabled=False)``
as the plain ``nn.Linear`` (the model's own precision), and inside ``with autocast(recipe=...,
gpu=...)`` that recipe and / or stack instead.  A forward pass
keeps the recipe and stack it started with for its backward pass, as TE's modules do, so
``loss.backward()`` may run after the block.  Blocks nest (the innermost wins, each argument left
``None`` is inherited from the enclosing block, then from the layer); the state is a
``contextvars.ContextVar``, so each thread or task has its own.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch

from ..training import get_recipe, get_stack
from .linear import AUTOCAST
from .swap import check_combination, required_multiple

__all__ = ["autocast"]


class _State(NamedTuple):
    enabled: bool
    recipe: object
    stack: object

    def resolve(self, layer):
        """(recipe, stack, multiple) a layer runs with in this block, or ValueError naming it."""
        R = self.recipe if self.recipe is not None else layer.recipe
        S = self.stack if self.stack is not None else layer.stack
        if (R, S) == (layer.recipe, layer.stack):
            return R, S, layer.multiple
        if self.recipe is None:
            R = R.unbound()     # the layer's recipe as the user gave it, before its old stack bound it
        if R.delayed() and R != layer.recipe:
            raise ValueError(f"layer {layer.layer_name!r}: autocast cannot switch to {R.name!r}: delayed scaling "
                             f"keeps its state in buffers that emulate() creates; emulate the model with it")
        try:
            R = check_combination(R, S)
        except ValueError as exc:
            raise ValueError(f"layer {layer.layer_name!r}: {exc}") from None
        mult = required_multiple(R, S)
        for what, v in (("in_features", layer.in_features), ("out_features", layer.out_features)):
            if v % mult:
                raise ValueError(f"layer {layer.layer_name!r}: {what} {v} is not a multiple of {mult}, "
                                 f"which {R.name} on {S.name} needs")
        return R, S, mult


@contextlib.contextmanager
def autocast(enabled=True, recipe=None, gpu=None):
    """Run the emulated layers FP8 (or not, or with another recipe / stack) inside a ``with`` block.

    Parameters
    ----------
    enabled : bool
        False: the emulated layers compute as plain ``nn.Linear`` (``torch.nn.functional.linear``).
        Not inherited: True unless given, inside an ``autocast(enabled=False)`` block too (as TE's
        ``fp8_autocast``: the innermost block wins).
    recipe : str or recipe object, optional
        Run this recipe instead of the layers' own (not a delayed-scaling recipe other than the
        layer's: its state lives in buffers ``emulate`` creates).
    gpu : str or Stack, optional
        Run on this stack instead of the layers' own.

    Examples
    --------
    >>> import torch
    >>> import fp8emu.torch as ft
    >>> model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    >>> _ = ft.emulate(model, "te-current", "h100")
    >>> torch.manual_seed(0) and None
    >>> x = torch.randn(16, 32)
    >>> with ft.autocast(enabled=False):
    ...     plain = model(x)
    >>> torch.equal(plain, torch.nn.functional.linear(x, model[0].weight, model[0].bias))
    True
    >>> with ft.autocast(gpu="exact"):
    ...     exact = model(x)
    >>> bool((exact != model(x)).any())      # exact sums differ from Hopper's fast accumulation
    True
    """
    token = _enter(enabled, recipe, gpu)
    try:
        yield
    finally:
        _leave(token)


#: Why a block cannot be traced (what ``torch.compile(..., fullgraph=True)`` reports).  Dynamo's own words were
#: "Dynamo does not know how to trace method `get` of class `ContextVar` ... Hint: Avoid calling `ContextVar.get` in
#: your code. Hint: Please report an issue to PyTorch.", which named fp8emu's code, not what the user can do.
_UNTRACEABLE = ("fp8emu.torch.autocast keeps its state in a contextvars.ContextVar, which torch.compile cannot trace "
                "(a graph break): enter the block outside the compiled function (compiled emulated layers read it "
                "when they run), or compile without fullgraph=True (torch.export: around the exported program's call)")


@torch.compiler.disable(reason=_UNTRACEABLE)
def _enter(enabled, recipe, gpu):
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    outer = AUTOCAST.get()
    R = get_recipe(recipe) if recipe is not None else (outer.recipe if outer is not None else None)
    S = get_stack(gpu) if gpu is not None else (outer.stack if outer is not None else None)
    if R is not None and S is not None:
        check_combination(R, S)
    return AUTOCAST.set(_State(enabled, R, S))


@torch.compiler.disable(reason=_UNTRACEABLE)
def _leave(token):
    AUTOCAST.reset(token)
