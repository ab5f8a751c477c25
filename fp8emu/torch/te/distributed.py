"""TE's activation checkpointing: :func:`checkpoint` (``transformer_engine/pytorch/distributed.py`` at d0067d0).

A checkpointed segment runs its forward without keeping its activations and runs it again (the recompute)
in the backward.  What TE adds to ``torch.utils.checkpoint``, and so this module:

* the recompute runs in the ``autocast`` block of the forward (TE re-enters ``autocast(enabled, recipe)`` as
  the forward found it), even where the backward is called outside every block;
* each TE module's call in the recompute runs with the state its call in the forward ran with and leaves the
  state as the forward left it: delayed scaling quantizes with the forward's scales and records no amax a
  second time (TE's ``copy_forward_fp8_meta_tensors_for_recompute`` / ``get_old_fp8_meta_tensors_for_recompute``
  / ``restore_fp8_meta_tensors``, one queue per module), and stochastic rounding draws the forward's bits (TE
  restores the RNG states; fp8emu replays the step that seeds them), so outputs, gradients and module state are
  those of the same model without checkpointing;
* the RNG states (torch's, and a ``get_rng_state_tracker``'s) are those of the forward: dropout drops the same.

``torch.utils.checkpoint`` over TE modules, as in TE, has none of this: its recompute runs in whatever
``autocast`` block the backward is called in.  Outside one it runs in high precision: the reentrant mode gives the
gradients of the high-precision model, the non-reentrant one finds other saved tensors than the forward's
(torch's ``CheckpointError``); inside one it advances the modules' state a second time.  TE has no warning for
it; neither has fp8emu.  Use :func:`checkpoint`.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn
from torch.utils.checkpoint import noop_context_fn

from .attention import DotProductAttention, MultiheadAttention, TransformerLayer
from .gemm import RecomputeFrame, in_frame
from .modules import LayerNorm, LayerNormLinear, LayerNormMLP, Linear, RMSNorm
from .quantization import autocast_state, current_autocast

__all__ = ["checkpoint", "has_te_modules"]

#: The modules TE's ``checkpoint`` checkpoints itself (``get_te_classes``); a module holding none of them goes
#: to ``torch.utils.checkpoint``.
TE_CLASSES = (LayerNorm, RMSNorm, Linear, LayerNormLinear, LayerNormMLP, DotProductAttention, MultiheadAttention,
              TransformerLayer)


def has_te_modules(network) -> bool:
    """Whether ``network`` holds a TE module; a callable that is not an ``nn.Module`` may, as TE assumes.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> has_te_modules(torch.nn.Sequential(torch.nn.Linear(4, 4))), has_te_modules(te.Linear(16, 16))
    (False, True)
    """
    if isinstance(network, nn.Module):
        return any(isinstance(m, TE_CLASSES) for m in network.modules())
    return True


def _is_group(g) -> bool:
    return torch.distributed.is_available() and isinstance(g, torch.distributed.ProcessGroup)


class _Phase:
    """The contexts a segment's forward or recompute runs in, entered anew each time (a ``retain_graph``
    backward recomputes twice)."""

    def __init__(self, *makers):
        self.makers, self.stacks = makers, []

    def __enter__(self):
        stack = contextlib.ExitStack()
        try:
            for make in self.makers:
                stack.enter_context(make())
        except BaseException:
            stack.close()
            raise
        self.stacks.append(stack)
        return self

    def __exit__(self, *exc):
        return self.stacks.pop().__exit__(*exc)


def checkpoint(function, *args, **kwargs):
    """TE's ``checkpoint(function, *args, distribute_saved_activations=False, get_rng_state_tracker=None,
    tp_group=None, use_reentrant=True, **kwargs)``: ``function(*args, **kwargs)``, its activations recomputed
    in the backward, with the numerics of the same call without checkpointing.

    The recompute runs in the forward's :class:`~fp8emu.torch.te.autocast` block (whatever block, if any, the
    backward runs in), with the RNG states of the forward, and each TE module replays the state it ran its
    forward call with, leaving its state (step counters, delayed scaling's amax histories and scales, the
    micro-batch weight cache) as the forward left it: outputs, gradients and state are bit-identical to the
    same model without checkpointing, for every recipe (module docstring).

    Parameters
    ----------
    function : callable
        The segment: a module or a function.  A module that holds no TE module goes to
        ``torch.utils.checkpoint.checkpoint`` with ``use_reentrant``, ``context_fn``, ``determinism_check``,
        ``debug`` and ``kwargs``, as TE sends it.
    *args
        Its positional arguments.  TE's deprecated form ``checkpoint(function, distribute_saved_activations,
        get_rng_state_tracker, tp_group, *args)`` is taken as TE takes it (with TE's ``DeprecationWarning``).
    distribute_saved_activations : bool, keyword, default False
        True splits the saved input across the tensor-parallel group (TE): with ``use_reentrant=True`` it needs
        ``torch.distributed`` initialized (TE's ``RuntimeError`` otherwise) and a group of one process, where it
        changes nothing (a larger group is refused: not emulated); with ``use_reentrant=False`` it has no effect
        (TE's warning).
    get_rng_state_tracker : callable, keyword, optional
        Returns an object with ``get_states()`` / ``set_states(states)`` (TE's ``CudaRNGStatesTracker``,
        Megatron's): its states are those of the forward in the recompute and restored after it, as in TE.
    tp_group : keyword, optional
        The group of ``distribute_saved_activations``; else unused (as in TE).
    use_reentrant : bool, keyword, default True
        True: the segment is one autograd node whose backward recomputes and differentiates it (TE's
        ``_CheckpointFunction``, here ``torch.utils.checkpoint``'s reentrant mode); False: the activations are
        recomputed when the backward first needs one (saved-tensor hooks, torch's non-reentrant mode).
    context_fn : callable, keyword, optional
        Returns two context managers, the forward's and the recompute's (``torch.utils.checkpoint``'s).
    determinism_check, debug : keyword
        Passed to ``torch.utils.checkpoint`` for a module without TE modules; else ignored, as in TE.
    **kwargs
        Every other keyword goes to ``function``.

    Returns
    -------
    What ``function`` returns.

    Raises
    ------
    TypeError
        ``function`` is not callable, ``use_reentrant`` or ``distribute_saved_activations`` not a bool, or
        ``get_rng_state_tracker`` neither None nor callable.
    RuntimeError
        ``distribute_saved_activations=True`` (reentrant) without ``torch.distributed`` initialized, as TE; in
        the backward, a recompute that calls a TE module more often than the forward did.
    ValueError
        ``distribute_saved_activations=True`` (reentrant) over a group of more than one process.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> torch.manual_seed(0) is not None
    True
    >>> mlp = te.LayerNormMLP(32, 64)
    >>> x = torch.randn(32, 32, requires_grad=True)
    >>> with te.autocast(recipe=te.recipe.DelayedScaling()):
    ...     y = te.checkpoint(mlp, x)
    >>> y.sum().backward()                         # recomputed in the DelayedScaling block, outside it
    >>> int(mlp.fp8emu_fc1.fp8emu_step)            # one forward call, not two
    1
    """
    return _checkpoint_eagerly(function, *args, **kwargs)


#: Why ``checkpoint`` is not traced (what ``torch.compile(..., fullgraph=True)`` reports).  Traced, the non-reentrant
#: mode was Dynamo's internal "NotImplementedError: checkpoint not implemented for ... NestedUserFunctionVariable
#: context_fn", and with fullgraph=True its "does not know how to trace method `get` of class `ContextVar` ... Please
#: report an issue to PyTorch", naming fp8emu's code; TE runs its ``checkpoint`` eagerly too (``torch._disable_dynamo``).
_UNTRACEABLE = ("fp8emu.torch.te.checkpoint runs eagerly under torch.compile, as TE's (its recompute replays the "
                "autocast block and module state kept in Python, a graph break): compile without fullgraph=True, or "
                "call te.checkpoint outside the compiled function")


#: The caller of ``checkpoint`` as seen from ``_checkpoint_eagerly``: the stack level of their warnings (``checkpoint``
#: and the frame ``torch.compiler.disable`` adds lie between).
_CALLER = 4


@torch.compiler.disable(reason=_UNTRACEABLE)
def _checkpoint_eagerly(function, *args, **kwargs):
    use_reentrant = kwargs.pop("use_reentrant", True)
    distribute = kwargs.pop("distribute_saved_activations", False)
    tp_group = kwargs.pop("tp_group", None)
    tracker = kwargs.pop("get_rng_state_tracker", None)
    if len(args) > 3 and isinstance(args[0], bool) and callable(args[1]) and (args[2] is None or _is_group(args[2])):
        # TE's test of its old positional form, and its warning
        warnings.warn("checkpoint: distribute_saved_activations, get_rng_state_tracker and tp_group given by position "
                      "is TE's deprecated form; pass them as keyword arguments to `checkpoint`",
                      DeprecationWarning, stacklevel=_CALLER)
        distribute, tracker, tp_group = args[0], args[1], args[2]
        args = args[3:]
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable (a module or a function), got "
                        f"{type(function).__name__}")
    for name, value in (("use_reentrant", use_reentrant), ("distribute_saved_activations", distribute)):
        if not isinstance(value, bool):
            raise TypeError(f"checkpoint: {name} must be True or False, got {value!r}")
    if tracker is not None and not callable(tracker):
        raise TypeError(f"checkpoint: get_rng_state_tracker must be a callable that returns an RNG states tracker "
                        f"(get_states / set_states), or None; got {type(tracker).__name__}")
    context_fn = kwargs.pop("context_fn", noop_context_fn)
    determinism_check = kwargs.pop("determinism_check", "default")
    debug = kwargs.pop("debug", False)
    if not has_te_modules(function):
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=use_reentrant, context_fn=context_fn,
                                                 determinism_check=determinism_check, debug=debug, **kwargs)
    if distribute:
        _check_distribute(use_reentrant, tp_group)

    frame, state, rng = RecomputeFrame(), current_autocast(), _TrackerStates(tracker)
    user_forward, user_recompute = context_fn()

    def cache_rng():
        rng.cache()
        return contextlib.nullcontext()

    forward = _Phase(cache_rng, lambda: user_forward, lambda: in_frame(frame, recompute=False))
    # TE's recompute: its own context, the user's, then autocast(enabled=fp8, recipe=fp8_recipe) of the forward
    recompute = _Phase(lambda: in_frame(frame, recompute=True), lambda: user_recompute,
                       lambda: autocast_state(state), rng.restored)
    if not use_reentrant:
        if not torch.is_grad_enabled():
            # nothing will be recomputed.  torch's non-reentrant checkpoint then calls the function without its forward
            # context (context_fn's first manager was skipped, silently, where the reentrant mode enters it); TE's own
            # non-reentrant checkpoint enters it whatever the grad mode
            with forward:
                return function(*args, **kwargs)

        def segment(*inputs):
            # the keywords go to the function, as TE sends them: given to torch's checkpoint, those it takes itself
            # were its own (preserve_rng_state=False recomputed with other dropout masks than the forward's, silently,
            # where TE and the reentrant mode give them to the function); TE restores the RNG states always
            return function(*inputs, **kwargs)
        return torch.utils.checkpoint.checkpoint(segment, *args, use_reentrant=False,
                                                 context_fn=lambda: (forward, recompute))
    calls = []

    def run(*inputs):
        # torch's reentrant checkpoint calls this once in the forward (under no_grad), then once per backward
        phase = recompute if calls else forward
        calls.append(None)
        with phase:
            out = function(*inputs, **kwargs)
        return _unaliased(out) if phase is forward else out
    return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=True)


def _unaliased(out):
    """The reentrant forward's outputs with each tensor that requires grad (under its ``no_grad`` only a leaf can: a
    parameter, such as the bias of ``return_bias=True``, or an input) as a new tensor of the same storage.

    torch's reentrant checkpoint (an ``autograd.Function``) gave such a returned parameter its own node as ``grad_fn``:
    the parameter was no longer a leaf, and the backward, whose recompute returns the same parameter, ran that node
    again and again (``te.Linear(..., return_bias=True)`` in a segment never finished its backward; TE's
    ``_CheckpointFunction`` has the same structure).  As a new tensor it is the node's output; the recompute returns
    the parameter itself, whose gradient autograd accumulates, as without checkpointing."""
    if isinstance(out, torch.Tensor):
        return out.detach() if out.requires_grad else out
    if isinstance(out, tuple):          # torch's reentrant checkpoint looks into a tuple, not deeper
        return tuple(_unaliased(o) if isinstance(o, torch.Tensor) else o for o in out)
    return out


def _check_distribute(use_reentrant, tp_group):
    if not use_reentrant:
        warnings.warn("checkpoint: distribute_saved_activations=True has no effect when `use_reentrant=False` (that "
                      "mode keeps no forward input to split: it recomputes through autograd's saved-tensor hooks), as "
                      "in TE", stacklevel=_CALLER + 1)
        return
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        raise RuntimeError("checkpoint: torch.distributed is not initialized. Call "
                           "torch.distributed.init_process_group() before using distribute_saved_activations=True "
                           "(as TE)")
    size = torch.distributed.get_world_size(tp_group)
    if size != 1:
        raise ValueError(f"checkpoint: distribute_saved_activations=True over a group of {size} processes (the saved "
                         "input split across tensor-parallel ranks) is not emulated; accepted: a group of one "
                         "process, or False")


class _TrackerStates:
    """A ``get_rng_state_tracker``'s states: cached before the forward, in force during the recompute."""

    def __init__(self, tracker):
        self.tracker, self.forward = tracker, None

    def cache(self):
        if self.tracker is not None:
            self.forward = self.tracker().get_states()

    @contextlib.contextmanager
    def restored(self):
        if self.tracker is None:
            yield
            return
        backward = self.tracker().get_states()
        self.tracker().set_states(self.forward)
        try:
            yield
        finally:
            self.tracker().set_states(backward)
