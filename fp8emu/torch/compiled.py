"""``torch.compile`` of emulated layers: one opaque custom op per layer call, the same bits as eager.

Dynamo cannot trace an emulated layer (its GEMMs are NumPy calls, its recipes Python objects, its
autocast state a ``contextvars.ContextVar``), so under ``torch.compile`` the layer's whole call is
one ``torch.library`` custom op, ``fp8emu::emulated_linear``, with a fake kernel (the output's shape
and dtype, as the eager layer gives them) and a registered backward, ``fp8emu::emulated_linear_backward``.
Compiled graphs therefore have no graph break at an emulated layer (``fullgraph=True`` works).

At run time the op runs the eager layer itself (:func:`torch.func.functional_call` with the op's
tensors as the layer's parameters and its state buffers) and its backward takes the gradients of
that eager call (``torch.autograd.grad``), so a compiled model's emulated layers give the eager bits,
forward and backward, whatever the recipe, the stack, the autocast block or the diagnostics: the same
code runs.  The op is functional: it returns the buffers the forward updates (the step counter,
delayed scaling's input and weight state) and the traced code copies them back, so the compiler sees
the updates.  The state a backward needs
is kept, per call, until that backward runs or the graph that would run it is dropped (or the layer is deleted).

The layer is found through its non-persistent ``fp8emu_key`` buffer (a graph input, so one compiled
graph serves every model of the same shapes without recompiling).  Torch's own kernels around the
emulated layers are what the backend makes of them: with ``backend="inductor"`` fused kernels (a
layer norm, a GELU) may differ from eager torch in the last bits; ``"aot_eager"`` runs torch's.

Examples
--------
>>> import torch
>>> import fp8emu.torch as ft
>>> model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
>>> _ = ft.emulate(model, "te-current", "h100")
>>> compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
>>> x = torch.randn(16, 32)
>>> torch.equal(compiled(x), model(x))
True
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from typing import List, Optional

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.func import functional_call
from torch.nn.utils import parametrize

from . import linear
from .linear import EmulatedLinear, refuse_meta_parameters

__all__ = ["compiled_forward"]

#: Layer key -> the layer (weakly): the op receives the key in the layer's ``fp8emu_key`` buffer.
_LAYERS = linear.LAYERS
_HANDLES = itertools.count(1)


#: The buffers an emulated forward updates, in the op's order: the step counter, then delayed scaling's input and
#: weight state (a layer of another recipe has the first only).
_STATE_NAMES = ("fp8emu_step",) + tuple(f"{k}_{role}" for role in ("input", "weight") for k in ("amax_history", "scale"))


def _state_names(layer) -> list:
    """The buffers an emulated forward updates (the step counter; delayed scaling's input and weight state)."""
    # the layer's own recipe, which made its buffers (an autocast block cannot switch to another delayed one;
    # and Dynamo cannot trace the ContextVar behind ``layer.recipe``)
    return list(_STATE_NAMES if layer._recipe.delayed() else _STATE_NAMES[:1])


#: Dispatch keys a custom op's kernel runs with excluded (it runs "below autograd") that the eager layer
#: inside it needs, so that autograd records the eager call's graph for the backward op.  (Autocast's keys
#: are left to ``torch.autocast``, which the op enters as it was where the graph was traced: removing
#: them from the excluded set would switch autocast on with its default dtype.)
_EAGER_KEYS = ("AutogradFunctionality", "AutogradOther", "AutogradNestedTensor", "ADInplaceOrView",
               "AutogradCPU", "AutogradCUDA")


@contextlib.contextmanager
def _eager():
    """Run the eager layer inside the op as it runs outside any op (torch's private dispatch-key guard)."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for name in _EAGER_KEYS:
        key = getattr(torch._C.DispatchKey, name, None)
        if key is not None:
            exclude = exclude.remove(key)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude):
        yield


def _autocast(x, autocast_dtype):
    """torch.autocast as it was where the graph was traced (a compiled graph applies it by itself)."""
    if autocast_dtype is None:
        return torch.autocast(x.device.type, enabled=False)
    return torch.autocast(x.device.type, dtype=autocast_dtype)


class _Bare(torch.nn.Module):
    """The layer's ``forward`` without its module hooks: the call that reached the op ran them already (a
    logging hook that graph-breaks ran twice per compiled call, and capture saw each layer "called twice")."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer.forward(x)


def _call(layer, tensors, x):
    outer = getattr(linear.IN_OP, "running", False)
    linear.IN_OP.running = True         # the layer runs eagerly here, whatever torch.compiler.is_compiling() says
    try:
        return functional_call(_Bare(layer), {f"layer.{k}": v for k, v in tensors.items()}, (x,), strict=False)
    finally:
        linear.IN_OP.running = outer


def _layer(key) -> EmulatedLinear:
    """The live layer a graph's op calls, or one error: a program ``torch.export`` made calls the layers of the
    model it was exported from (their recipe, stack and state), which a deleted model or another process has not
    (a bare ``KeyError`` of the key's number)."""
    layer = _LAYERS.get(int(key))
    if layer is None:
        raise RuntimeError(f"fp8emu::emulated_linear: the emulated layer this graph calls (key {int(key)}) no longer "
                           "exists; a compiled or exported graph (torch.export) runs the live layers of the model it "
                           "was made from, so keep that model alive in this process, or emulate and export again "
                           "(a program saved with torch.export.save cannot run emulated layers in another process)")
    return layer


@torch.library.custom_op("fp8emu::emulated_linear", mutates_args=())
def _emulated_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                     state: List[torch.Tensor], key: torch.Tensor, training: bool,
                     autocast_dtype: Optional[torch.dtype]) -> List[torch.Tensor]:
    """[output, backward handle, *the state buffers after the call] (functional: the caller copies them back)."""
    layer = _layer(key)
    after = [t.clone() for t in state]
    tensors = {"weight": weight, **({"bias": bias} if bias is not None else {}),
               **dict(zip(_state_names(layer), after))}
    if not training:
        with _eager(), torch.no_grad(), _autocast(x, autocast_dtype):
            y = _call(layer, tensors, x)
        return [y.clone(memory_format=torch.contiguous_format), torch.zeros((), dtype=torch.int64), *after]
    computed = [n for n in ("weight", "bias") if parametrize.is_parametrized(layer, n)]
    if computed:
        # functional_call's weight replaces the parametrization for the call (torch writes it into the
        # parametrization's tensors and back): the eager graph ends at the given weight, not at them, and
        # their gradients were zero, silently (checked here, at run time: an error raised while Dynamo traces
        # would make it skip the layer's frame for good)
        raise ValueError(f"layer {layer.layer_name!r}: its {' and '.join(computed)} is computed by a "
                         "parametrization added after emulate (weight norm, torch.nn.utils.parametrize), which "
                         "a compiled emulated layer cannot train (the parametrization's tensors would get zero "
                         "gradients); train it without torch.compile, or register the parametrization before "
                         "emulate (the layer is then left in high precision)")
    # an input that is no float is passed on as it is, for the layer's own check to name it
    leaves = {k: v.detach().requires_grad_(True) for k, v in (("x", x), ("weight", weight), ("bias", bias))
              if v is not None and v.is_floating_point()}
    tensors.update({k: v for k, v in leaves.items() if k != "x"})
    with _eager(), torch.enable_grad(), _autocast(x, autocast_dtype):
        y = _call(layer, tensors, leaves.get("x", x))
    handle = next(_HANDLES)
    layer.compiled_pending[handle] = (y, leaves)
    token = torch.full((), handle, dtype=torch.int64)
    # the graph saves the handle for its backward: when the graph is dropped without a backward (a loss
    # computed with autograd on and never backpropagated), the eager call's graph goes with it (it was kept
    # for ever, one entry per such forward)
    weakref.finalize(token, layer.compiled_pending.pop, handle, None)
    return [y.detach().clone(memory_format=torch.contiguous_format), token, *after]


def _no_meta_operand(x, weight, bias, state, key):
    """Refuse a run-time call with a meta weight or bias beside real operands (the fake kernel is also the op's Meta
    kernel, which the dispatcher picks for such a call).

    A model built under ``torch.device("meta")`` and emulated has meta weights beside CPU state buffers; compiled,
    the op's call then ran this fake kernel at run time: an output of uninitialized memory and a step counter
    copied back from ``empty_like``, silently.  While a graph is traced every operand is a fake tensor."""
    tensors = [t for t in (x, weight, bias, key, *state) if t is not None]
    if all(is_fake(t) for t in tensors):
        return
    # a run-time call whose operands are all meta (a model moved to "meta" after emulate, called on a meta input)
    # is refused too, as the eager layer refuses it: torch's dispatcher runs this kernel for it, which would hand
    # back meta outputs as if the layer had computed.  Dynamo fake-ifies meta tensors where it traces, so every
    # call made while a graph is traced or compiled passes the test above.
    if key.is_meta or is_fake(key):
        # the layer cannot be looked up: its state is named as the op holds it
        owner = "an emulated layer"
        buffers = {**dict(zip(_STATE_NAMES, state)), "fp8emu_key": key}
    else:
        layer = _layer(key)
        owner, buffers = f"layer {layer.layer_name!r}", layer.state_buffers()
    refuse_meta_parameters(owner, weight, bias, buffers)
    raise ValueError(f"{owner}: input is a meta tensor (a shape without values); an emulated layer computes "
                     "on its input's values")


@_emulated_linear.register_fake
def _(x, weight, bias, state, key, training, autocast_dtype):
    _no_meta_operand(x, weight, bias, state, key)
    dtype = autocast_dtype if autocast_dtype is not None and x.dtype != torch.float64 else x.dtype
    return [x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=dtype), x.new_empty((), dtype=torch.int64),
            *[torch.empty_like(t) for t in state]]


@torch.library.custom_op("fp8emu::emulated_linear_backward", mutates_args=())
def _emulated_linear_backward(dy: torch.Tensor, handle: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                              bias: Optional[torch.Tensor], key: torch.Tensor) -> List[torch.Tensor]:
    layer = _layer(key)
    entry = layer.compiled_pending.pop(int(handle), None)
    if entry is None:
        raise RuntimeError(f"layer {layer.layer_name!r}: the backward of a compiled emulated call ran twice "
                           "(or without its forward); call backward once per forward (retain_graph is not "
                           "supported for compiled emulated layers)")
    y, leaves = entry
    names = list(leaves)
    with _eager():
        grads = torch.autograd.grad(y, [leaves[n] for n in names], dy, allow_unused=True)
    got = dict(zip(names, grads))
    out = []
    for n, like in (("x", x), ("weight", weight), ("bias", bias)):
        g = got.get(n)
        # contiguous, as the fake kernel says: inductor checks the strides a custom op returns against its fake
        # kernel's, and empty_like of a transposed input or weight had promised theirs (an AssertionError)
        if g is not None:
            out.append(g.clone(memory_format=torch.contiguous_format))
        else:
            out.append((like if like is not None else x).new_zeros(like.shape if like is not None else (0,)))
    return out


@_emulated_linear_backward.register_fake
def _(dy, handle, x, weight, bias, key):
    return [x.new_empty(x.shape), weight.new_empty(weight.shape),
            bias.new_empty(bias.shape) if bias is not None else x.new_empty((0,))]


def _setup_context(ctx, inputs, output):
    x, weight, bias, state, key, training, _ = inputs
    ctx.training, ctx.has_bias, ctx.n_state = training, bias is not None, len(state)
    ctx.save_for_backward(output[1], x, weight, bias if bias is not None else weight.new_empty((0,)), key)


def _backward(ctx, grads):
    if not ctx.training:
        raise RuntimeError("an emulated layer compiled without autograd (torch.no_grad, inference_mode or "
                           "nothing requiring grad) has no backward; run the forward with autograd")
    handle, x, weight, bias, key = ctx.saved_tensors
    dx, dw, db = torch.ops.fp8emu.emulated_linear_backward(grads[0], handle, x, weight,
                                                           bias if ctx.has_bias else None, key)
    return dx, dw, (db if ctx.has_bias else None), [None] * ctx.n_state, None, None, None


_emulated_linear.register_autograd(_backward, setup_context=_setup_context)


def compiled_forward(layer: EmulatedLinear, x: torch.Tensor) -> torch.Tensor:
    """The layer's call as Dynamo traces it: one ``fp8emu::emulated_linear`` op (see the module docstring)."""
    if not torch.compiler.is_dynamo_compiling() and linear.AUTOCAST.get() is not None:
        # non-strict torch.export runs this code on fake tensors: an fp8emu.torch.autocast block entered in the traced
        # forward (or around the export call) is Python state that the program does not hold, so the exported program
        # ran the layer's own recipe where the module ran the block's (plain F.linear for enabled=False), silently.
        # (Dynamo cannot read the block's ContextVar: a block around a compiled call is read by the op at run time.)
        raise RuntimeError(f"layer {layer.layer_name!r}: torch.export cannot record an fp8emu.torch.autocast block (its "
                           "state is Python's, not the graph's), so the exported program would run the layer without "
                           "it; export outside the block and enter it around the exported program's call "
                           "(ep.module()(x)): the layers read it when they run")
    params = (layer.weight,) if layer.bias is None else (layer.weight, layer.bias)
    # not layer.records_autograd(x): Dynamo cannot trace torch.is_inference_mode_enabled(); under inference mode
    # with grad enabled the op's eager call finds that it records nothing and runs forward only
    training = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params))
    state = [getattr(layer, n) for n in _state_names(layer)]
    dev = x.device.type
    # torch.autocast has no "meta" device (is_autocast_enabled("meta") raised inside Dynamo, an
    # InternalTorchDynamoError for a model moved to meta): such a call is refused by the op, as eagerly
    autocast_dtype = torch.get_autocast_dtype(dev) if dev != "meta" and torch.is_autocast_enabled(dev) else None
    y, _, *after = torch.ops.fp8emu.emulated_linear(x, layer.weight, layer.bias, state, layer.fp8emu_key,
                                                    training, autocast_dtype)
    # detached, not under torch.no_grad: torch.export records a no_grad block as a higher-order op whose node
    # torch.export.load refuses ("Node.meta wrap_with_set_grad_enabled is missing val field")
    for buf, new in zip(state, after):
        buf.copy_(new.detach())
    return y


linear.COMPILED_FORWARD = compiled_forward
