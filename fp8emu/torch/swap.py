"""``emulate``: swap a model's ``nn.Linear`` layers for emulated ones, in place; diagnostics."""

from __future__ import annotations

import dataclasses
import math
import re

import torch
from torch import nn

from .linear import EmulatedLinear
from .recipes import PASSES, get_recipe
from .stacks import get_stack

__all__ = ["emulate", "EmulationReport", "diagnostics", "reset_diagnostics", "check_combination",
           "MIN_TORCH"]

#: The oldest torch this adapter is written for (the ``fp8emu[torch]`` extra asks for it).
MIN_TORCH = (2, 4)

#: Keys of every diagnostics row, in order.
ROW_KEYS = ("layer", "pass", "step", "tensor", "amax", "scale", "frac_saturated", "frac_underflow",
            "frac_flushed", "n_nonfinite", "gemm_rel_err")


@dataclasses.dataclass
class EmulationReport:
    """What :func:`emulate` did: ``swapped`` (layer name -> one-line description) and
    ``skipped`` (layer name -> reason), with the recipe and stack used."""

    recipe: object
    stack: object
    swapped: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)

    def __str__(self):
        lines = [f"{len(self.swapped)} layer(s) emulated with {self.recipe.name} on {self.stack.name}"]
        lines += [f"  {k}: {v}" for k, v in self.swapped.items()]
        lines += [f"  skipped {k}: {v}" for k, v in self.skipped.items()]
        return "\n".join(lines)


def _torch_version():
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def check_combination(recipe, stack):
    """The recipe as it runs on ``stack`` (:meth:`~fp8emu.torch.recipes.TrainingRecipe.on`), or
    one-line ValueError if ``stack`` cannot run one of ``recipe``'s passes."""
    try:
        for p in PASSES:
            stack.accumulator(recipe.gemm_family(p), recipe.split(p))
        return recipe.on(stack)
    except ValueError as exc:
        raise ValueError(f"recipe {recipe.name!r} on gpu {stack.name!r}: {exc}") from None


def emulate(model, recipe="te-delayed", gpu="h100", *, diagnostics=False, seed=0) -> EmulationReport:
    """Swap ``model``'s ``nn.Linear`` layers, in place, for FP8/FP4-emulated ones.

    Parameters
    ----------
    model : torch.nn.Module
        Its ``nn.Linear`` sub-modules are replaced (their parameters are kept).
    recipe : str or recipe object
        One of :func:`fp8emu.torch.recipe_names`, or a frozen recipe object.
    gpu : str or Stack
        One of :func:`fp8emu.torch.stack_names`, or a :class:`fp8emu.torch.Stack`.
    diagnostics : bool, keyword-only
        Record per-layer, per-pass rows (:func:`diagnostics`).
    seed : int, keyword-only
        Seeds stochastic rounding (with the layer index, the step and the pass).

    Returns
    -------
    EmulationReport

    Examples
    --------
    >>> import torch
    >>> from fp8emu.torch import emulate
    >>> model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    >>> report = emulate(model, "te-current", "h100")
    >>> list(report.swapped), report.skipped
    (['0'], {'2': 'out_features 10 is not a multiple of 16, which te-current on h100 needs'})
    >>> emulate(model, "te-current", "h100")
    Traceback (most recent call last):
    ...
    ValueError: layer '0' is already emulated (te-current on h100); emulate a model once
    """
    if _torch_version() < MIN_TORCH:
        raise RuntimeError(f"fp8emu.torch needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}; "
                           f"this is torch {torch.__version__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    if not isinstance(diagnostics, bool):
        raise TypeError(f"diagnostics must be True or False, got {diagnostics!r}")
    R, S = get_recipe(recipe), get_stack(gpu)
    R = check_combination(R, S)
    for name, mod in model.named_modules():
        if isinstance(mod, EmulatedLinear):
            raise ValueError(f"layer {name!r} is already emulated ({mod.recipe.name} on {mod.stack.name}); "
                             "emulate a model once")
    if isinstance(model, nn.Linear):
        raise ValueError("emulate swaps the nn.Linear layers inside a module, in place; wrap a bare "
                         "nn.Linear in torch.nn.Sequential first")
    report = EmulationReport(R, S)
    # a Linear reached under several names (one module used twice) becomes one emulated layer at every
    # name, so that its uses stay shared and none of them runs in full precision
    refs = {}
    for n, m in model.named_modules(remove_duplicate=False):
        if type(m) is nn.Linear:
            refs.setdefault(id(m), (m, []))[1].append(n)
    for index, (lin, names) in enumerate(refs.values()):
        name = names[0]
        mult = _multiple(R, S)
        bad = [f"{what} {v} is not a multiple of {mult}, which {R.name} on {S.name} needs"
               for what, v in (("in_features", lin.in_features), ("out_features", lin.out_features))
               if v % mult]
        if bad:
            report.skipped[name] = "; ".join(bad)
            continue
        layer = EmulatedLinear(lin, R, S, name, index, diagnostics=diagnostics, seed=seed, multiple=mult)
        for ref in names:
            parent_name, _, attr = ref.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, layer)
        also = f" (one layer, also used as {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
        report.swapped[name] = _describe(R, S) + also
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and type(m) is not nn.Linear and name not in report.swapped:
            report.skipped[name] = f"a subclass of nn.Linear ({type(m).__name__}), left as it is"
    return report


def _multiple(R, S) -> int:
    """What in_features, out_features and the token count must be multiples of."""
    m = R.multiple
    if R.gemm_family("fprop").startswith("torchao") and S.accumulator(R.gemm_family("fprop"), False) in (
            "torchao-emulate", "torch-cpu"):
        m = 1           # torchao converts every nn.Linear, and torch's CPU GEMMs take any size
    for p in PASSES:
        if not R.high_precision(p):
            k = S.multiple(R.family)
            m = m * k // math.gcd(m, k)
    return m


def _describe(R, S) -> str:
    accs = []
    for p in PASSES:
        acc = S.accumulator(R.gemm_family(p), R.split(p))
        accs.append(f"{p} {getattr(acc, 'name', acc) if acc is not None else 'high precision'}")
    return f"{R.describe()}; {S.name}: {', '.join(accs)}; {S.dtype} activations, fp32 wgrad"


def _layers(model):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return [m for m in model.modules() if isinstance(m, EmulatedLinear)]


def diagnostics(model) -> list:
    """The diagnostics rows recorded so far by ``model``'s emulated layers.

    One row per layer, pass ("fprop", "dgrad", "wgrad"), step and operand ("tensor":
    "input", "weight" or "grad_output"), with the keys of :data:`ROW_KEYS`: amax, scale,
    frac_saturated, frac_underflow, frac_flushed, n_nonfinite (see
    :func:`fp8emu.torch.gemms.operand_stats`) and gemm_rel_err (relative Frobenius error of
    the emulated GEMM against the float64 product of the unquantized operands, plus the bias
    where the GEMM adds one: fprop, except torchao's, which adds it after its GEMM).
    """
    return [dict(r) for m in _layers(model) for r in m.diagnostic_rows]


def reset_diagnostics(model) -> None:
    """Forget the rows recorded so far."""
    for m in _layers(model):
        m.diagnostic_rows.clear()
