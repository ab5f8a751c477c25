"""``emulate``: swap a model's ``nn.Linear`` layers for emulated ones, in place; diagnostics."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import warnings

import numpy as np
import torch
from torch import nn

from ..training import PASSES, get_recipe, get_stack
from .linear import FLOATS, EmulatedLinear

__all__ = ["emulate", "EmulationReport", "HighPrecisionWarning", "diagnostics", "reset_diagnostics",
           "check_combination", "MIN_TORCH"]

#: The oldest torch this adapter accepts: the ``fp8emu[torch]`` extra's bound (``torch>=2.7`` in
#: ``pyproject.toml``; a test keeps the two equal).
MIN_TORCH = (2, 7)

#: Keys of every diagnostics row, in order.
ROW_KEYS = ("layer", "pass", "step", "tensor", "amax", "scale", "frac_saturated", "frac_clipped", "frac_underflow",
            "frac_flushed", "n_nonfinite", "gemm_rel_err")


class HighPrecisionWarning(UserWarning):
    """:func:`emulate` left layers in high precision that ``module_filter_fn`` did not filter out."""


#: Why an ``nn.MultiheadAttention``'s projections stay in high precision (torch's own module computes them).
_MHA_OUT = ("the output projection of nn.MultiheadAttention, whose forward passes out_proj.weight and "
            "out_proj.bias to F.multi_head_attention_forward and never calls out_proj: it runs in high "
            "precision whatever it is swapped for")
_MHA_IN = ("the packed q/k/v projection of nn.MultiheadAttention (a Parameter, not an nn.Linear), computed "
           "inside F.multi_head_attention_forward: it runs in high precision")


@dataclasses.dataclass
class EmulationReport:
    """What :func:`emulate` did, layer by layer.

    Attributes
    ----------
    recipe, stack
        The recipe (as bound to the stack) and the stack.
    swapped : dict
        Emulated layer name -> one-line description.
    skipped : dict
        Layer (or packed attention Parameter) name -> why it runs in high precision although
        ``module_filter_fn`` did not filter it out (warned about: :class:`HighPrecisionWarning`).
    filtered : dict
        Layer name -> why it was left in high precision on purpose (``module_filter_fn``).
    first, last : str or None
        The first and the last ``nn.Linear`` in registration order (``model.named_modules(remove_duplicate=False)``:
        a layer used at several names counts at each), usually the first and last layers a token passes, whatever
        happened to them.
    fast_path_off : list of str
        ``nn.TransformerEncoderLayer`` / ``nn.TransformerEncoder`` modules whose fused inference path
        (which reads the weights directly, bypassing the layers) was turned off so that the emulated
        layers run in eval mode too.
    """

    recipe: object
    stack: object
    swapped: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)
    filtered: dict = dataclasses.field(default_factory=dict)
    first: str = None
    last: str = None
    fast_path_off: list = dataclasses.field(default_factory=list)
    #: every name of a layer -> the name it is reported under (its first): ``first`` / ``last`` may be another one
    _primary: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def high_precision(self) -> dict:
        """Every name left in high precision (skipped, then filtered) -> why."""
        return {**self.skipped, **self.filtered}

    def __str__(self):
        lines = [f"{len(self.swapped)} layer(s) emulated with {self.recipe.name} on {self.stack.name}"]
        lines += [f"  {k}: {v}" for k, v in self.swapped.items()]
        lines += [f"  high precision {k}: {v}" for k, v in self.skipped.items()]
        lines += [f"  filtered {k}: {v}" for k, v in self.filtered.items()]
        for what, name in (("first", self.first), ("last", self.last)):
            if name is not None:
                # by the name the layer is reported under: the second name of a layer used twice read "high
                # precision" for an emulated layer
                state = "emulated" if self._primary.get(name, name) in self.swapped else "high precision"
                lines.append(f"  {what} nn.Linear (registration order): {name!r}, {state}")
        return "\n".join(lines)


def _torch_version():
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def check_combination(recipe, stack):
    """The recipe as it runs on ``stack`` (:meth:`~fp8emu.training.TrainingRecipe.on`), or
    one-line ValueError if ``stack`` cannot run one of ``recipe``'s passes."""
    try:
        for p in PASSES:
            stack.accumulator(recipe.gemm_family(p), recipe.split(p))
        return recipe.on(stack)
    except ValueError as exc:
        raise ValueError(f"recipe {recipe.name!r} on gpu {stack.name!r}: {exc}") from None


def emulate(model, recipe="te-delayed", gpu="h100", *, module_filter_fn=None, autocast_only=False,
            diagnostics=False, seed=0) -> EmulationReport:
    """Swap ``model``'s ``nn.Linear`` layers, in place, for FP8/FP4-emulated ones.

    Parameters
    ----------
    model : torch.nn.Module
        Its ``nn.Linear`` sub-modules are replaced (their parameters are kept).
    recipe : str or recipe object
        One of :func:`fp8emu.torch.recipe_names`, or a frozen recipe object.
    gpu : str or Stack
        One of :func:`fp8emu.torch.stack_names`, or a :class:`fp8emu.torch.Stack`.
    module_filter_fn : callable, keyword-only, optional
        torchao's ``convert_to_float8_training`` argument: ``module_filter_fn(module, fqn) -> bool``
        is called for every ``nn.Linear`` (subclasses included) with its fully qualified name; a layer for
        which it returns False stays in high precision on purpose (``report.filtered``, no warning).  An
        ``nn.Linear`` compiled by TorchScript is no module it is asked about: it is always in
        ``report.skipped``.  None: every layer is a candidate.  It must return True or False.
    autocast_only : bool, keyword-only
        False (the default, as torchao's ``Float8Linear``): the layers run FP8 everywhere except
        inside ``fp8emu.torch.autocast(enabled=False)``.  True (Transformer Engine's rule): they run
        FP8 only inside ``fp8emu.torch.autocast()``, and as the plain ``nn.Linear`` outside it.
    diagnostics : bool, keyword-only
        Record per-layer, per-pass rows (:func:`diagnostics`).
    seed : int (a Python or NumPy integer), keyword-only
        Seeds stochastic rounding (with the layer index, the step and the pass).  The index counts the
        plain ``nn.Linear`` layers of ``model`` from 0, so parts of one model emulated by separate calls
        with one seed draw the same bits at layers of the same index (correlated rounding noise that no GPU
        has): emulate the whole model in one call (a filter leaves layers out), or give each call its own seed.

    Returns
    -------
    EmulationReport
        Layers left in high precision that the filter did not filter out (sizes the recipe cannot
        take, ``nn.Linear`` subclasses, layers compiled by TorchScript, ``nn.MultiheadAttention``'s projections) are in
        ``report.skipped`` and named in one :class:`HighPrecisionWarning`.

    Examples
    --------
    >>> import warnings
    >>> import torch
    >>> from fp8emu.torch import emulate
    >>> model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     report = emulate(model, "te-current", "h100")
    >>> list(report.swapped), report.skipped
    (['0'], {'2': 'out_features 10 is not a multiple of 16, which te-current on h100 needs'})
    >>> print(caught[0].message)                       # doctest: +ELLIPSIS
    1 layer(s) left in high precision (fp8emu.torch.emulate): '2' (out_features 10 ...); pass module_filter_fn ...
    >>> emulate(model, "te-current", "h100")
    Traceback (most recent call last):
    ...
    ValueError: layer '0' is already emulated (te-current on h100); emulate a model once

    The last layer kept in high precision on purpose (no warning):

    >>> model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    >>> report = emulate(model, "te-current", "h100", module_filter_fn=lambda mod, fqn: fqn != "2")
    >>> report.filtered, report.first, report.last
    ({'2': 'module_filter_fn returned False'}, '0', '2')
    """
    if _torch_version() < MIN_TORCH:
        raise RuntimeError(f"fp8emu.torch needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}; "
                           f"this is torch {torch.__version__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    # a NumPy integer (a seed from np.arange) is the seed of the same Python integer, kept as one
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    seed = int(seed)
    for what, v in (("diagnostics", diagnostics), ("autocast_only", autocast_only)):
        if not isinstance(v, bool):
            raise TypeError(f"{what} must be True or False, got {v!r}")
    if module_filter_fn is not None and not callable(module_filter_fn):
        raise TypeError(f"module_filter_fn must be None or a callable (module, fqn) -> bool, "
                        f"got {type(module_filter_fn).__name__}")
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
        if isinstance(m, nn.Linear):
            refs.setdefault(id(m), (m, []))[1].append(n)
    scripted = [n for n, m in model.named_modules() if scripted_linear(m)]
    if not refs and not scripted:
        warnings.warn(f"fp8emu.torch.emulate: {type(model).__name__} holds no nn.Linear layer, so nothing is "
                      "emulated (emulate swaps nn.Linear layers)", HighPrecisionWarning, stacklevel=2)
    # in registration order, each name of a shared layer where it is registered (grouped by layer, the last name of
    # Sequential(a, b, a, b) was b's "3", of Sequential(a, b, a) b's "1")
    names = [n for n, m in model.named_modules(remove_duplicate=False) if isinstance(m, nn.Linear) or n in scripted]
    report.first, report.last = (names[0], names[-1]) if names else (None, None)
    report._primary = {n: ns[0] for _, ns in refs.values() for n in ns}
    wanted = {key: _accepted(module_filter_fn, lin, ns) for key, (lin, ns) in refs.items()}
    mha_out = _attention_projections(model, refs, wanted, report)
    for name in scripted:
        # TorchScript runs its compiled graph, which calls no Python module: such a layer stayed in high precision
        # without a word, and a model scripted as a whole was said to hold no nn.Linear.  The filter is not asked
        # (torchao's contract: nn.Linear modules; a traced layer has no in_features for a filter to read)
        report.skipped[name] = _SCRIPTED
    # the layer index seeds stochastic rounding: counted over every plain nn.Linear, emulated or not, as
    # before filters existed, so that a model's bits do not change with what the filter leaves out
    plain = [key for key, (lin, _) in refs.items() if type(lin) is nn.Linear]
    for key, (lin, names) in refs.items():
        name = names[0]
        if not wanted[key]:
            report.filtered[name] = "module_filter_fn returned False"
            continue
        if key in mha_out:
            report.skipped[name] = _MHA_OUT
            continue
        if type(lin) is not nn.Linear:
            report.skipped[name] = f"a subclass of nn.Linear ({type(lin).__name__}), left as it is"
            continue
        if (why := _not_swappable(lin) or _compiled_alone(model, names)) is not None:
            report.skipped[name] = why
            continue
        mult = required_multiple(R, S)
        # a layer of zero width is an empty GEMM (its output its bias, or nothing): nothing to quantize,
        # and the quantizers' amax of an empty tensor has no value
        bad = [f"{what} 0: an empty layer, nothing to quantize"
               for what, v in (("in_features", lin.in_features), ("out_features", lin.out_features)) if v == 0]
        bad = bad or [f"{what} {v} is not a multiple of {mult}, which {R.name} on {S.name} needs"
                      for what, v in (("in_features", lin.in_features), ("out_features", lin.out_features))
                      if v % mult]
        if bad:
            report.skipped[name] = "; ".join(bad)
            continue
        layer = EmulatedLinear(lin, R, S, name, plain.index(key), diagnostics=diagnostics, seed=seed,
                               multiple=mult, autocast_only=autocast_only)
        for ref in names:
            parent_name, _, attr = ref.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, layer)
        also = f" (one layer, also used as {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
        report.swapped[name] = _describe(R, S) + also
    report.fast_path_off = _fast_path_off(model)
    if report.skipped:
        listed = "; ".join(f"{k!r} ({v})" for k, v in report.skipped.items())
        # a filter cannot leave out a TorchScript layer (it is not asked about one)
        hint = ("" if set(report.skipped) <= set(scripted)
                else "; pass module_filter_fn to leave them out on purpose")
        warnings.warn(f"{len(report.skipped)} layer(s) left in high precision (fp8emu.torch.emulate): {listed}{hint}",
                      HighPrecisionWarning, stacklevel=2)
    return report


def _no_fast_path(module, args):
    """A forward pre-hook that does nothing: its presence turns torch's encoder-layer fast path off."""
    return None


def _fast_path_off(model) -> list:
    """Turn off torch's fused inference path where it would bypass emulated layers; their names.

    In eval mode without autograd ``nn.TransformerEncoderLayer.forward`` calls
    ``torch._transformer_encoder_layer_fwd`` with ``linear1.weight`` / ``linear2.weight`` unless a
    forward hook is registered on it (a condition of its fast path), so the emulated layers would
    silently not run; ``nn.TransformerEncoder`` would hand them nested tensors (``use_nested_tensor``)."""
    names = []
    for name, m in model.named_modules():
        if isinstance(m, nn.TransformerEncoderLayer) and any(isinstance(c, EmulatedLinear) for c in m.modules()):
            m.register_forward_pre_hook(_no_fast_path)
            names.append(name)
        elif isinstance(m, nn.TransformerEncoder) and getattr(m, "use_nested_tensor", False) \
                and any(isinstance(c, EmulatedLinear) for c in m.modules()):
            m.use_nested_tensor = False
            names.append(name)
    return names


#: A module's hooks that run around its forward and backward (emulate replaces the module: they would be lost).
_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
#: Its hooks that run when its state dict is saved or loaded: lost the same way (a load pre-hook that renames an old
#: checkpoint's keys stopped running, and ``load_state_dict(..., strict=False)`` left the weight unloaded, silently).
_STATE_HOOKS = ("_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
                "_load_state_dict_post_hooks")


#: Why an ``nn.Linear`` compiled by TorchScript stays in high precision.
_SCRIPTED = ("an nn.Linear compiled by TorchScript (torch.jit.script or torch.jit.trace), whose graph calls no Python "
             "module to swap: left as it is; emulate the eager model (and compile it with torch.compile, not TorchScript)")


def scripted_linear(m) -> bool:
    """Whether ``m`` is an ``nn.Linear`` that ``torch.jit.script`` or ``torch.jit.trace`` compiled."""
    return isinstance(m, torch.jit.ScriptModule) and getattr(m, "original_name", None) == "Linear"


def _not_swappable(lin):
    """Why an ``nn.Linear`` cannot be replaced without changing what it computes, or None.

    The emulated layer is a new module holding the layer's Parameters: hooks registered on the layer would
    silently stop running, and a weight that is no Parameter (``torch.nn.utils.weight_norm`` computes it
    from ``weight_g`` and ``weight_v`` in a forward pre-hook) would be frozen at its last value, its
    Parameters gone from ``model.parameters()``."""
    if not isinstance(lin.weight, nn.Parameter) or not (lin.bias is None or isinstance(lin.bias, nn.Parameter)):
        return ("its weight or bias is not a Parameter (computed, e.g. by torch.nn.utils.weight_norm), which the "
                "emulated layer would freeze: left as it is")
    odd = [f"{what} is {t.dtype}" for what, t in (("weight", lin.weight), ("bias", lin.bias))
           if t is not None and t.dtype not in FLOATS]
    if odd:
        # the emulated layer casts its operands to float32: a complex weight lost its imaginary part (and the
        # complex input the layer takes was refused), an integer weight that nn.Linear refuses was computed with
        return (f"its {' and '.join(odd)}, not a float32, bfloat16, float16 or float64 tensor an FP8 GEMM could "
                "take: left as it is")
    hooks = sum(len(getattr(lin, h, None) or {}) for h in _HOOKS)
    if hooks:
        return (f"{hooks} forward/backward hook(s) registered on it, which the emulated layer (a new module) "
                "would not run: left as it is; register them on the emulated layer after emulate()")
    extra = ([f"Parameter {n!r}" for n in lin._parameters if n not in ("weight", "bias")]
             + [f"buffer {n!r}" for n in lin._buffers] + [f"sub-module {n!r}" for n in lin._modules])
    if extra:
        # the emulated layer holds the weight and bias only: the rest left model.parameters() (an optimizer made
        # afterwards never trained it) and the state dict (a checkpoint saved without it), silently
        return (f"{', '.join(extra)} registered on it besides weight and bias, which the emulated layer (a new "
                "module) would not hold: left as it is")
    hooks = sum(len(getattr(lin, h, None) or {}) for h in _STATE_HOOKS)
    if hooks:
        return (f"{hooks} state-dict hook(s) registered on it (run by state_dict or load_state_dict), which the "
                "emulated layer (a new module) would not run: left as it is; register them on the emulated layer "
                "after emulate()")
    return None


def _compiled_alone(model, names):
    """Why a layer that ``torch.compile`` wrapped by itself cannot be swapped, or None.

    The wrapper (``OptimizedModule``) calls the module it was built with, which it holds as ``_orig_mod``:
    swapping ``_orig_mod`` changed the report and ``named_modules`` but not what ran (the plain layer, silently)."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    if dynamo is None:
        return None
    for n in names:
        parent_name, _, attr = n.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if attr == "_orig_mod" and isinstance(parent, dynamo.OptimizedModule):
            where = repr(parent_name) if parent_name else "the model"
            return (f"compiled by itself (torch.compile wraps it as {where}), and the compiled wrapper calls the "
                    "layer it was built with, whatever replaces it: left as it is; emulate before torch.compile, "
                    "or compile the module around it")
    return None


def _accepted(fn, lin, names) -> bool:
    """``fn``'s verdict on one layer (the same at every name it is reached by), or a clear error."""
    if fn is None:
        return True
    verdicts = {}
    for n in names:
        v = fn(lin, n)
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"module_filter_fn must return True or False, got {v!r} for layer {n!r}")
        verdicts[n] = bool(v)
    if len(set(verdicts.values())) > 1:
        raise ValueError(f"module_filter_fn accepts one layer under some of its names and not others "
                         f"({verdicts}); one module is one layer: give it one verdict")
    return next(iter(verdicts.values()))


def _attention_projections(model, refs, wanted, report) -> set:
    """The ids of ``nn.MultiheadAttention`` output projections; their packed input projections reported.

    torch's attention module computes both projections itself from the Parameters, so neither can be
    emulated by swapping a layer: they are skipped (warned about) unless the filter turned the
    attention's ``out_proj`` down, which leaves the whole attention in high precision on purpose."""
    out = set()
    for name, m in model.named_modules():
        if not isinstance(m, nn.MultiheadAttention):
            continue
        out.add(id(m.out_proj))
        on_purpose = not wanted.get(id(m.out_proj), True)
        prefix = f"{name}." if name else ""
        params = ["in_proj_weight"] if m._qkv_same_embed_dim else ["q_proj_weight", "k_proj_weight", "v_proj_weight"]
        for p in params:
            if on_purpose:
                report.filtered[prefix + p] = "module_filter_fn returned False for its attention's out_proj"
            else:
                report.skipped[prefix + p] = _MHA_IN
    return out


def required_multiple(R, S) -> int:
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
    :func:`fp8emu.torch.gemms.operand_stats`), frac_clipped (:func:`fp8emu.torch.linear.frac_clipped`)
    and gemm_rel_err (relative Frobenius error of
    the emulated GEMM against the float64 product of the unquantized operands, plus the bias
    where the GEMM adds one: fprop, except torchao's, which adds it after its GEMM).

    ``frac_saturated`` counts codes at the format's largest magnitude; block scaling (MXFP8, NVFP4,
    1x128 blocks) puts each block's largest element there by design, so for block formats it is "block
    maximum at the format's maximum", not clipping.  ``frac_clipped`` counts true saturation: inputs
    beyond what their scale lets the format hold, by more than rounding (NaN for unquantized operands
    and for NVFP4's Hadamard-transformed wgrad copies).
    """
    return [dict(r) for m in _layers(model) for r in m.diagnostic_rows]


def reset_diagnostics(model) -> None:
    """Forget the rows recorded so far."""
    for m in _layers(model):
        m.diagnostic_rows.clear()
