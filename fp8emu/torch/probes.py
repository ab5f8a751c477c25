"""Same-state gradient probes: one model state and one batch under a recipe x stack and two references.

A probe holds everything fixed that training would vary (the weights, the batch) and measures what a
recipe on a GPU stack does to each linear layer's three GEMMs: fprop's output ``Y``, dgrad's ``dX``
and wgrad's ``dW``.  Two levels:

* **Layer probes** (:func:`layer_passes`): the operands of one layer (``X``, ``W``, ``b``, ``dY``,
  taken from a float32 run) go through the recipe's quantizers and the stack's GEMM models, the
  layer built by :func:`fp8emu.torch.emulate`; the reference is float64 math on the same float32
  operands (:func:`exact_passes`).  Only the layer's own quantization and accumulation differ.
* **Model probes** (:func:`capture`, :func:`qat_model`): the whole model's forward and backward,
  per layer, under the recipe, under "QAT" (every forward quantized as the recipe does, every
  backward the exact float32 chain rule of the float32 layer) and in plain torch float32 autograd.
  The recipe against QAT is what its backward quantization does; QAT against float32 what its
  forward does to the gradients.

:func:`exact_accumulation` turns a stack into one with the same dtype and quantized operands but
exact accumulation: the recipe on it minus float32 is the **quantization** error, the stack minus
it the **accumulation** error (:mod:`fp8emu.lab.grad_study` has the metrics).

Stochastic rounding is seeded by :func:`fp8emu.torch.emulate`'s ``seed`` (with the layer index,
the step and the pass): draws ``0 .. N-1`` of a recipe's random parts are the seeds ``0 .. N-1``.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((32, 32), (16, 32), (32, 16)))
>>> out = layer_passes(x, w, None, dy, "te-current", "exact")
>>> sorted(out), out["wgrad"].shape
(['dgrad', 'fprop', 'wgrad'], (16, 32))
>>> ref = exact_passes(x, w, None, dy)
>>> err = np.linalg.norm(out["wgrad"] - ref["wgrad"]) / np.linalg.norm(ref["wgrad"])
>>> bool(0.01 < err < 0.1)
True
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _nn_module

from ..training import get_recipe, get_stack
from .linear import EmulatedLinear
from .swap import HighPrecisionWarning, emulate, scripted_linear
from .te import LayerNormLinear, LayerNormMLP, Linear as TELinear

__all__ = ["LayerCapture", "layer_passes", "exact_passes", "exact_accumulation", "capture", "qat_model",
           "emulated_model", "PASS_TENSORS"]

#: What each pass produces, as :class:`LayerCapture` names it.
PASS_TENSORS = {"fprop": "y", "dgrad": "dx", "wgrad": "dw"}


@dataclasses.dataclass
class LayerCapture:
    """One linear layer's operands and results in one forward and backward (float32 NumPy arrays,
    tokens flattened into rows): input ``x`` (M x K), weight ``w`` (N x K), bias ``b`` (N or None),
    output ``y`` (M x N), output gradient ``dy``, input gradient ``dx`` (None when the input needs
    no gradient) and weight gradient ``dw``."""

    x: np.ndarray
    w: np.ndarray
    b: object
    y: np.ndarray
    dy: np.ndarray
    dx: object
    dw: np.ndarray

    def passes(self) -> dict:
        """``{"fprop": y, "dgrad": dx, "wgrad": dw}``."""
        return {p: getattr(self, t) for p, t in PASS_TENSORS.items()}


#: The dtypes a capture keeps exactly in float32.
_EXACT32 = (torch.float32, torch.float16, torch.bfloat16)


def _valueless(t):
    """What ``t`` is where NumPy cannot read its values (a meta or a sparse tensor), else None."""
    if t.device.type == "meta":
        return "meta tensor (a shape without values)"
    return None if t.layout == torch.strided else f"{t.layout} tensor"


def _np32(t, what=None):
    # float16 and bfloat16 are exact in float32; a float64 tensor would be rounded (a captured output no
    # longer the product of the captured operands), so capture refuses it rather than cast it
    if what is not None and _valueless(t):
        # torch's "Cannot copy out of meta tensor; no data!" (a model built on the meta device, never
        # materialized) or its sparse-to-NumPy error, naming no layer
        raise ValueError(f"{what} is a {_valueless(t)}; capture records the values of dense tensors: materialize "
                         "the model (model.to_empty(device=...) and load or initialize its weights) or densify it")
    if what is not None and t.dtype not in _EXACT32:
        raise TypeError(f"{what} is {t.dtype}; capture records float32 operands, which hold float32, float16 and "
                        "bfloat16 exactly: run the model in one of them (model.float())")
    return t.detach().to(torch.float32).contiguous().numpy().copy()


def _rows(t):
    """Tokens flattened into rows (explicit sizes: ``reshape(-1, 0)`` of a zero-width tensor is ambiguous)."""
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


#: What each operand's axes are.
_AXES = {"x": "tokens x in_features", "w": "out_features x in_features", "b": "out_features",
         "dy": "tokens x out_features"}


def _operands(x, w, b, dy) -> tuple:
    """The layer's operands as float32 arrays, or one error naming what is wrong.

    A probe's operands are float32 (what a float32 run captures): another dtype would be rounded by
    the emulated layer and not by the float64 reference, so it is refused, not cast."""
    out = []
    for name, a, nd in (("x", x, 2), ("w", w, 2), ("b", b, 1), ("dy", dy, 2)):
        if a is None and name == "b":
            out.append(None)
            continue
        # a bfloat16 tensor has no NumPy dtype (np.asarray raised torch's "unsupported ScalarType"): its
        # dtype is checked as torch names it, before any conversion
        got = a.dtype if isinstance(a, torch.Tensor) else None
        if got is not None and _valueless(a):
            # torch's "Cannot copy out of meta tensor; no data!" or its sparse-to-NumPy error, naming no operand
            raise TypeError(f"{name} is a {_valueless(a)}; a probe's operands are dense float32 values (a NumPy "
                            "array, or a dense tensor)")
        arr = np.asarray(a.detach().cpu()) if got == torch.float32 else None if got is not None else np.asarray(a)
        if arr is None or arr.dtype != np.float32:
            raise TypeError(f"{name} must be a float32 array (a probe's operands are float32, as a float32 run "
                            f"captures them), got {got if arr is None else arr.dtype}; convert it (.astype(np.float32), "
                            "tensor.float()) if that rounding is meant")
        if arr.ndim != nd:
            raise ValueError(f"{name} must be {'a 2-D matrix' if nd == 2 else '1-D'} ({_AXES[name]}), "
                             f"got shape {arr.shape}")
        out.append(arr)
    x, w, b, dy = out
    (m, k), (n, k2) = x.shape, w.shape
    want = {"w": ((n, k), w.shape), "dy": ((m, n), dy.shape)}
    if b is not None:
        want["b"] = ((n,), b.shape)
    bad = [f"{name} has shape {got}, expected {exp}" for name, (exp, got) in want.items() if exp != got]
    if k2 != k or bad:
        raise ValueError(f"operands of a {k} -> {n} layer with {m} tokens (x {x.shape}, w {w.shape}): "
                         + "; ".join(bad or [f"w has {k2} in_features, x has {k}"]))
    return x, w, b, dy


def exact_passes(x, w, b, dy) -> dict:
    """The three GEMMs of a linear layer in float64 on the float32 operands (no rounding at all).

    ``x`` (M x K), ``w`` (N x K), ``b`` (N or None), ``dy`` (M x N): float32 arrays (another dtype is
    a TypeError, a shape that does not fit a ValueError)."""
    x, w, b, dy = _operands(x, w, b, dy)
    x64, w64, dy64 = (np.asarray(a, np.float64) for a in (x, w, dy))
    y = x64 @ w64.T
    if b is not None:
        y = y + np.asarray(b, np.float64)
    return {"fprop": y, "dgrad": dy64 @ w64, "wgrad": dy64.T @ x64}


def exact_accumulation(gpu):
    """``gpu`` (a stack or its name) with every GEMM accumulated exactly (rounded once to float32),
    the same dtype and the same quantized operands (same block-FP8 scale rules): the stack's
    quantization without its accumulation.

    Examples
    --------
    >>> s = exact_accumulation("h100")
    >>> s.name, s.split, s.fast, s.dtype
    ('h100+exact-acc', 'exact', 'exact', 'bfloat16')
    """
    s = get_stack(gpu)
    acc = {f: ("exact" if getattr(s, f) is not None else None) for f in ("block_fp8", "mx", "nvfp4")}
    # decided by the fields, not the name: a stack of the user's named "...+exact-acc" came back as it was,
    # its GEMMs accumulated on the hardware's datapath, silently; the name is not suffixed twice
    name = s.name if s.name.endswith("+exact-acc") else s.name + "+exact-acc"
    return dataclasses.replace(s, name=name, split="exact", fast="exact", torchao=None, **acc)


def _single(w, b):
    # float32 whatever torch.set_default_dtype says: a float16 / bfloat16 default rounded the float32 w and b given
    # (3072 of 3072 wgrad outputs of a 32-token 64 -> 48 te-current probe differed), silently
    lin = nn.Linear(w.shape[1], w.shape[0], bias=b is not None, dtype=torch.float32)
    with torch.no_grad():      # contiguous: torch.from_numpy refuses a view of negative strides (w[::-1])
        lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w, np.float32)))
        if b is not None:
            lin.bias.copy_(torch.from_numpy(np.ascontiguousarray(b, np.float32)))
    return lin


def layer_passes(x, w, b, dy, recipe, gpu, *, seed=0, warm=True) -> dict:
    """fprop, dgrad and wgrad of one layer under ``recipe`` on ``gpu`` (float32 NumPy arrays).

    ``x`` (M x K), ``w`` (N x K), ``b`` (N or None), ``dy`` (M x N): float32 arrays, as
    :func:`exact_passes` takes them.  ``seed`` seeds the recipe's stochastic rounding.  ``warm``
    (True or False): a delayed-scaling recipe first runs the same operands once, so its amax history
    holds this tensor's amax (else its first step quantizes with scale 1).
    """
    x, w, b, dy = _operands(x, w, b, dy)
    if not isinstance(warm, bool):
        raise TypeError(f"warm must be True or False, got {warm!r}")
    seq = nn.Sequential(_single(w, b))
    with warnings.catch_warnings():       # a layer the recipe cannot take is the ValueError below
        warnings.simplefilter("ignore", HighPrecisionWarning)
        rep = emulate(seq, get_recipe(recipe), get_stack(gpu), seed=seed)
    if "0" not in rep.swapped:
        raise ValueError(f"recipe {get_recipe(recipe).name!r} on {get_stack(gpu).name!r} does not take a "
                         f"{w.shape[1]} -> {w.shape[0]} layer with {len(x)} tokens: {rep.skipped.get('0')}")
    layer = seq[0]
    if len(x) % layer.multiple:
        # the layer's own error named a layer '0' the caller never made and pointed to inference without
        # autograd, which a probe of the three passes cannot use
        raise ValueError(f"recipe {get_recipe(recipe).name!r} on {get_stack(gpu).name!r} does not take a "
                         f"{w.shape[1]} -> {w.shape[0]} layer with {len(x)} tokens: the token count (the "
                         f"wgrad GEMM's K, x's rows) must be a multiple of {layer.multiple}")

    def once():
        xt = torch.from_numpy(np.asarray(x, np.float32).copy()).requires_grad_(True)
        layer.weight.grad = None
        y = seq(xt)
        y.backward(torch.from_numpy(np.asarray(dy, np.float32).copy()))
        return {"fprop": _np32(y), "dgrad": _np32(xt.grad), "wgrad": _np32(layer.weight.grad)}

    if warm and layer.recipe.delayed():
        once()
    return once()


def emulated_model(model, recipe, gpu, *, seed=0):
    """A deep copy of ``model`` with its linear layers emulated (the original is left as it is)."""
    m = copy.deepcopy(model)
    emulate(m, get_recipe(recipe), get_stack(gpu), seed=seed)
    return m


class _QATLinear(nn.Module):
    """Forward: the emulated layer's quantized output; backward: the float32 layer's exact gradients
    (straight through the quantization, the chain rule of ``F.linear`` in float32)."""

    def __init__(self, emulated: EmulatedLinear):
        super().__init__()
        self.emulated = emulated
        self.weight, self.bias = emulated.weight, emulated.bias

    def forward(self, x):
        with torch.no_grad():
            yq = self.emulated(x.detach())
        y = F.linear(x, self.weight, self.bias)
        return y + (yq.to(y.dtype) - y).detach()


def qat_model(model, recipe, gpu, *, seed=0):
    """A deep copy of ``model`` whose swapped layers run the recipe's quantized forward and the exact
    float32 backward (:class:`_QATLinear`); layers the recipe cannot take stay float32."""
    m = emulated_model(model, recipe, gpu, seed=seed)
    # every name of a layer used twice (named_children yields a module once: Sequential(lin, act, lin) kept
    # its second use emulated, its backward quantized), one wrapper per layer so that its uses stay shared
    wrappers = {}
    for mod in list(m.modules()):
        for child_name, child in list(mod._modules.items()):
            if isinstance(child, EmulatedLinear):
                if id(child) not in wrappers:
                    wrappers[id(child)] = _QATLinear(child)
                setattr(mod, child_name, wrappers[id(child)])
    return m


def _linears(model):
    """The linear layers by name; the emulated layer inside a QAT wrapper is the wrapper's."""
    mods = dict(model.named_modules())
    inner = {n + ".emulated" for n, m in mods.items() if isinstance(m, _QATLinear)}
    return {n: m for n, m in mods.items()
            if isinstance(m, (nn.Linear, EmulatedLinear, _QATLinear)) and n not in inner}


def _check_own_weights(loss, called):
    """One error naming a called layer whose weight reaches the loss by a path outside its calls.

    ``.grad`` sums every path: an embedding tied to the layer (a GPT's ``lm_head``) or a penalty on the
    weight in ``loss_fn`` added its gradient to the layer's wgrad, which capture returned as ``dw``.  The
    weight's paths are the edges into its gradient accumulator in the loss's graph, one per call."""
    calls = {}
    for mod in called.values():
        calls[id(mod.weight)] = calls.get(id(mod.weight), 0) + 1
    paths = dict.fromkeys(calls, 0)
    seen, stack = set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                key = id(getattr(nxt, "variable", None))
                if key in paths:
                    paths[key] += 1
                stack.append(nxt)
    for name, mod in called.items():
        if paths[id(mod.weight)] > calls[id(mod.weight)]:
            raise ValueError(f"the weight of layer {name!r} reaches the loss outside the layer too (tied to an "
                             "embedding, or used in loss_fn), so its gradient is more than the layer's wgrad; a "
                             "probe needs a weight that only its layer uses (untie it for the probe)")


def _check_no_grad_hooks(called):
    """One error naming a called layer whose weight has a gradient hook: ``.grad`` (capture's ``dw``) is then what
    the hook made of the layer's wgrad (a ``register_hook`` that clips or scales it was returned as ``dw``, silently),
    and an optimizer stepped in the backward (``register_post_accumulate_grad_hook``) may free it."""
    for name, mod in called.items():
        w = mod.weight
        kinds = [k for k, hooks in (("register_hook", getattr(w, "_backward_hooks", None)),
                                    ("register_post_accumulate_grad_hook",
                                     getattr(w, "_post_accumulate_grad_hooks", None))) if hooks]
        if kinds:
            raise ValueError(f"the weight of layer {name!r} has a gradient hook ({' and '.join(kinds)}), so its .grad "
                             "need not be the layer's wgrad (a hook may clip, scale or replace it, or step an optimizer "
                             "and free it); a probe records the wgrad itself: remove the hook for the probe")


def capture(model, loss_fn) -> tuple:
    """One forward and backward of ``loss_fn(model)`` with every linear layer's operands and results.

    Returns ``(loss, {layer name: LayerCapture})``: every linear layer the forward calls (a layer it
    does not call is left out).  ``loss_fn(model)`` must return a scalar tensor.  The parameters'
    ``.grad`` are cleared first (and hold this backward's gradients after).  A ValueError names a layer
    called more than once in the forward (its gradients would be summed over the calls; activation
    checkpointing's recompute in the backward is no second call), two called
    layers sharing one weight (tied: the same sum), a layer whose weight reaches the loss outside the
    layer too (tied to an embedding, or in a penalty of ``loss_fn``: the same sum), a layer
    run with autograd off inside the forward, a layer whose output does not reach the loss, a layer whose weight
    needs no gradient (frozen: it has no wgrad) and a layer whose weight is computed (a parametrization or
    weight norm), a called subclass of ``nn.Linear`` with a forward of its own (its output need not be
    ``x w^T + b``), and a ``loss_fn`` that runs a backward itself, a model holding :mod:`fp8emu.torch.te` modules
    (their GEMMs are no ``nn.Linear``) or ``nn.Linear`` layers compiled by TorchScript (no call to see), and a layer
    that ran with another weight or bias than its Parameter (``torch.func.functional_call``: capture records the
    Parameters), and a layer whose weight has a gradient hook (``register_hook``, ``register_post_accumulate_grad_hook``:
    its ``.grad`` need not be the wgrad); a TypeError a layer that runs in float64 (float32 would round what it
    records).  ``w`` and ``b`` are the values the forward used (a hook that changes the weights in the backward
    changes no capture).  A forward hook of the model's on a layer may change what the next layer gets: ``y`` and
    ``dy`` are the layer's own output and its gradient, before the hook; a global forward hook
    (``register_module_forward_hook``, which torch runs before the layer's own) that changes a layer's output is a
    ValueError.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable model -> scalar loss tensor, got {type(loss_fn).__name__}")
    if not torch.is_grad_enabled():
        raise RuntimeError("capture runs a backward: call it with autograd on (not under torch.no_grad() or "
                           "torch.inference_mode())")
    te_layers = [n for n, m in model.named_modules() if isinstance(m, (TELinear, LayerNormLinear, LayerNormMLP))]
    if te_layers:
        # their GEMMs are no nn.Linear: capture returned ({}), silently, or left them out of a mixed model
        kind = type(model.get_submodule(te_layers[0])).__name__
        raise ValueError(f"layer {te_layers[0]!r} is a module of fp8emu.torch.te ({kind}), "
                         "whose GEMMs capture cannot see: it probes torch.nn.Linear layers (and those "
                         "fp8emu.torch.emulate swapped); build the model of nn.Linear layers for the probe")
    scripted = [n for n, m in model.named_modules() if scripted_linear(m)]
    if scripted:
        # a scripted or traced model runs its compiled graph: no nn.Linear instance, no module call to hook, so
        # capture returned the loss and ({}) or left such layers out of a mixed model, silently
        raise ValueError(f"layer {scripted[0] or '(the model itself)'!r} is an nn.Linear compiled by TorchScript "
                         "(torch.jit.script or torch.jit.trace), whose calls capture cannot see: it probes eager "
                         "torch.nn.Linear layers; capture the model before scripting or tracing it")
    layers = _linears(model)
    seen, handles = {}, []

    def pre(mod, args, kwargs):
        # the layer's own view of its input: a hook on the input itself got the input's whole gradient (the
        # sum over q, k and v projections of one input, or a residual path), not this layer's dgrad
        x = args[0] if args else kwargs.get("input")
        if isinstance(x, torch.Tensor) and _valueless(x):
            # a meta input was torch's "unknown device type for autocast", a sparse one the dispatcher's
            # "Could not run 'aten::view' with arguments from the 'SparseCPU' backend" (pages of kernels)
            name = next(n for n, m in layers.items() if m is mod)
            raise ValueError(f"the input of layer {name!r} is a {_valueless(x)}; capture records the values of dense "
                             "tensors: give the model a dense input with values (a model on the meta device: "
                             "model.to_empty(device=...) and load or initialize its weights)")
        if args and isinstance(args[0], torch.Tensor):
            return (args[0].view_as(args[0]), *args[1:]), kwargs
        if isinstance(kwargs.get("input"), torch.Tensor):
            return args, {**kwargs, "input": kwargs["input"].view_as(kwargs["input"])}
        return None

    def gradients(rec, x, out):
        if x.requires_grad:
            x.register_hook(lambda g: rec.__setitem__("dx", _np32(_rows(g))))
        if out.requires_grad:     # not under no_grad (torch refuses a hook there); the checks below name it
            out.register_hook(lambda g: rec.__setitem__("dy", _np32(_rows(g))))

    def recompute(name, x, out):
        # activation checkpointing runs the layer's forward again inside the backward (it said "called twice in
        # one forward"); without reentry the gradients flow through the forward's own graph, hooked already
        rec = seen[name]
        if rec["grad_mode"] or not torch.is_grad_enabled():
            return
        # torch.utils.checkpoint(use_reentrant=True) ran the forward under no_grad: the recompute's graph is the
        # one the backward takes, on the same values
        if not (np.array_equal(rec["x"], _np32(_rows(x))) and np.array_equal(rec["y"], _np32(_rows(out)))):
            raise ValueError(f"layer {name!r}: activation checkpointing's recompute gave it another input or output "
                             "than its forward, so the gradients are not of the captured operands")
        rec["grad_mode"] = True
        gradients(rec, x, out)

    def fwd(name):
        def hook(mod, args, kwargs, out):
            x = args[0] if args else kwargs.get("input")      # lin(input=x): no positional input
            raw_out = raw.pop(id(mod), None)
            if name in seen and torch._C._current_graph_task_id() != -1 and isinstance(x, torch.Tensor):
                return recompute(name, x, out)
            if name in seen:
                raise ValueError(f"layer {name!r} was called twice in one forward; a probe needs one call "
                                 "per layer")
            if isinstance(mod, nn.Linear) and type(mod).forward is not nn.Linear.forward:
                # its output was recorded as y, its weight's gradient as dw, though neither need be the linear
                # layer's (a fake-quantized weight, a scaled output: y was not x w^T + b, dw not dy^T x), silently
                raise ValueError(f"layer {name!r} is a {type(mod).__name__}, a subclass of nn.Linear with a forward "
                                 "of its own, so its output need not be x w^T + b; capture probes torch.nn.Linear "
                                 "layers (emulate leaves such a subclass as it is too): use nn.Linear for the probe")
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"layer {name!r} was called without an input tensor (args {len(args)}, "
                                f"keywords {sorted(kwargs)})")
            if raw_out is not None and (out is not raw_out[0] or getattr(out, "_version", None) != raw_out[1]):
                # torch runs global forward hooks before a layer's own, capture's first among these: y and dy were
                # the hook's output and its gradient, not x w^T + b's, silently
                raise ValueError(f"layer {name!r}: a global forward hook (torch.nn.modules.module."
                                 "register_module_forward_hook) changed its output before capture saw it, so y and dy "
                                 "would not be the layer's; remove that hook for the probe")
            if torch.is_autocast_enabled(x.device.type):
                # autocast ran the layer on rounded copies of x and w: the captured y was not their product
                raise RuntimeError(f"layer {name!r} ran under torch.autocast, which rounds its input and weight "
                                   "before the product; capture records the operands as the layer holds them: "
                                   "run loss_fn without autocast (model.to(dtype) for a low-precision model)")
            rec = seen[name] = {"x": _np32(_rows(x), f"the input of layer {name!r}"),
                                "y": _np32(_rows(out), f"the output of layer {name!r}"),
                                # the weight and bias as this forward used them: read after the backward they
                                # were an optimizer's next step where a hook steps in the backward (y was not
                                # x w^T + b, silently)
                                "w": _np32(mod.weight, f"the weight of layer {name!r}"),
                                "b": None if mod.bias is None else _np32(mod.bias, f"the bias of layer {name!r}"),
                                "grad_mode": torch.is_grad_enabled(),
                                # the tensors the call used: torch.func.functional_call puts others in their place
                                "operands": (mod.weight, mod.bias)}
            gradients(rec, x, out)
        return hook

    raw, ids = {}, {id(m) for m in layers.values()}

    def first(mod, args, out):
        if id(mod) in ids:
            raw[id(mod)] = (out, getattr(out, "_version", None))

    if getattr(_nn_module, "_global_forward_hooks", None):
        # a global forward hook runs before every module's own: one of capture's own, first of them, sees the layer's
        # output as its forward returned it (registered only where such hooks are, so nothing changes elsewhere)
        handles.append(_nn_module.register_module_forward_hook(first))
        _nn_module._global_forward_hooks.move_to_end(handles[-1].id, last=False)
    for name, mod in layers.items():
        handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        # first of the layer's forward hooks: the layer's own output (a user's hook may return another, which
        # the captured y and dy then were, while dw stayed the layer's: y was not x w^T + b, dw not dy^T x)
        handles.append(mod.register_forward_hook(fwd(name), with_kwargs=True, prepend=True))
    try:
        for p in model.parameters():
            p.grad = None
        loss = loss_fn(model)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(f"loss_fn must return a scalar loss tensor, got {got}")
        if any(p.grad is not None for p in model.parameters()):
            # a training step as loss_fn: its backward freed the graph (torch then advised retain_graph=True,
            # with which capture's backward doubled every .grad: dw twice the layer's wgrad)
            raise ValueError("loss_fn ran a backward itself (the model has gradients before capture's backward); "
                             "capture runs the one backward: return the loss without calling backward()")
        if not loss.requires_grad:        # torch's own "element 0 of tensors does not require grad"
            raise ValueError("loss_fn returned a loss that does not depend on the model's parameters (it needs no "
                             "gradient: detached, or computed under no_grad); capture needs its backward")
        called = {n: m for n, m in layers.items() if n in seen}
        for name, mod in called.items():
            # a parametrization or weight norm computes the weight at each access: it has no .grad (capture
            # said "does not reach the loss") and no fixed identity (the tie check below raised a KeyError)
            if mod.weight.requires_grad and not mod.weight.is_leaf:
                raise ValueError(f"the weight of layer {name!r} is computed at each use (a parametrization or "
                                 "weight norm), not a Parameter, so it has no gradient of its own to probe; remove "
                                 "it for the probe (torch.nn.utils.parametrize.remove_parametrizations(layer, "
                                 "'weight'), torch.nn.utils.remove_weight_norm(layer))")
            # functional_call(model, {name: p + eps}) (a sharpness-aware step, perturbed or averaged weights): the
            # forward used those, capture recorded the Parameters, so y was not x w^T + b, silently; a computed tensor
            # (a parametrization) is a new one at each access, of the same values: not compared
            other = [what for what, used, own in zip(("weight", "bias"), seen[name]["operands"], (mod.weight, mod.bias))
                     if used is not own and (own is None or own.is_leaf)]
            if other:
                raise ValueError(f"layer {name!r} ran with another {other[0]} than "
                                 "its Parameter (given by torch.func.functional_call or another stateless call), so "
                                 "the captured weight and bias are not the operands of its forward; a probe records a "
                                 "layer's own Parameters: load those values into the model and call it directly")
        _check_own_weights(loss, called)
        _check_no_grad_hooks(called)
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    caps, owner = {}, {}
    for name, mod in layers.items():
        if name not in seen:
            continue
        # a weight two called layers share (tied) gets the sum of their wgrads in .grad, not this layer's
        if (other := owner.setdefault(id(mod.weight), name)) != name:
            raise ValueError(f"layers {other!r} and {name!r} share one weight (tied), so its gradient is the sum "
                             "of both layers' wgrads; a probe needs each called layer's own weight")
        r = seen[name]
        if not mod.weight.requires_grad:
            raise ValueError(f"the weight of layer {name!r} needs no gradient (frozen), so it has no wgrad to "
                             "probe; call requires_grad_(True) on it for the probe")
        if not r["grad_mode"]:
            # the output may well reach the loss's value: "does not reach the loss" was false here
            raise ValueError(f"layer {name!r} ran with autograd off (under torch.no_grad() or torch.inference_mode() "
                             "inside the model's forward or loss_fn), so it has no gradients: a probe needs autograd "
                             "on for every layer it calls")
        if "dy" not in r:
            raise ValueError(f"layer {name!r} ran in the forward but its output does not reach the loss (no "
                             "output gradient): a probe needs every layer it calls on the loss's path")
        if mod.weight.grad is None:
            # its output reached the loss: "does not reach the loss" was false here
            raise ValueError(f"the weight of layer {name!r} has no gradient after the backward though the layer's "
                             "output reached the loss (a hook set it to None in the backward, as an optimizer "
                             "stepped there does?); a probe reads the wgrad there: remove that hook for the probe")
        caps[name] = LayerCapture(x=r["x"], w=r["w"], b=r["b"], y=r["y"], dy=r["dy"], dx=r.get("dx"),
                                  dw=_np32(mod.weight.grad))
    return float(loss.detach()), caps
