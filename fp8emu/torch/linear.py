"""The emulated linear layer: an ``nn.Module`` whose three GEMMs run through fp8emu.

Forward quantizes the input and the weight (and, as Transformer Engine does, their copies
for the backward GEMMs, from the high-precision tensors) and runs fprop; backward quantizes
the output gradient and runs dgrad and wgrad.  Every quantizer and GEMM is a NumPy call of
:mod:`fp8emu.scaling` / :mod:`fp8emu.gemm`, so results depend neither on torch's thread
count nor on the machine.  Delayed-scaling state (amax histories, scales) and the step
counter that seeds stochastic rounding are buffers, so they are in the ``state_dict``.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import secrets
import threading
import types
import warnings
import weakref

import ml_dtypes
import numpy as np
import torch
import torch.fx
from torch import nn
from torch.autograd import forward_ad

from ..gemm.torch_cpu import TORCHAO_EMULATE
from ..scaling.tensor import expand
from ..training import Operand, Stack, TENVFP4BlockScaling, TrainingRecipe
from .gemms import (
    STATE_LOCK, buffers_as, first_order_only, float32_state, operand_stats, run_gemm, take_step, value_key,
)
from .tensors import float32_overflow

__all__ = ["EmulatedLinear", "refuse_meta_parameters"]

_ROLES = ("input", "weight", "grad_output")
#: The innermost :func:`fp8emu.torch.autocast` block's state (None outside every block): ``enabled``
#: and ``resolve(layer) -> (recipe, stack, multiple)``.  A ContextVar: each thread / task has its own.
AUTOCAST = contextvars.ContextVar("fp8emu_torch_autocast", default=None)
_PASS_CODE = {"fprop": 0, "dgrad": 1, "wgrad": 2}
#: The recipe, stack and token multiple an :func:`fp8emu.torch.autocast` block makes a layer run for one call:
#: layer id -> (recipe, stack, multiple).  A ContextVar, not the layer's attributes: a call in one thread
#: switched the layer for every other thread (a thread outside any block ran the block's stack, silently).
_ACTING = contextvars.ContextVar("fp8emu_torch_acting", default=None)
#: Every live emulated layer by its key (weakly; its ``fp8emu_key`` buffer): the compiled op finds its layer here.
LAYERS = weakref.WeakValueDictionary()
#: Keys are never reused (an id is, once its object is gone: a graph exported with ``torch.export`` that outlived
#: its model would have found, silently, whichever new layer took the address), and each process counts from its
#: own random start, so that a program saved in one process and loaded in another names none of the new layers.
_KEYS = itertools.count(secrets.randbits(40) << 20)
#: Set by :mod:`fp8emu.torch.compiled`: the layer's call as ``torch.compile`` traces it.
COMPILED_FORWARD = None
#: ``running`` is True in a thread while the compiled op runs its eager layer (set by :mod:`fp8emu.torch.compiled`).
IN_OP = threading.local()
#: The tensor dtypes an emulated layer takes (input, weight, bias).
FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


#: How torch's ``mm`` receives each pass's operands in torchao's ``Float8Linear`` (row-major N or a
#: transposed view T; torchao 0.18: ``input @ weight.t()``, ``grad @ weight``, ``grad.t() @ input``),
#: which can change the CPU BLAS's summation order (:mod:`fp8emu.gemm.cpu_order`).
_MM_LAYOUT = {"fprop": "NT", "dgrad": "NN", "wgrad": "TN"}


#: How many of its last calls a layer can replay for activation checkpointing's recompute (each keeps its state:
#: delayed scaling's 3 x 1024 amax are 12 KiB).
_RECOMPUTE_KEPT = 16


def _traced() -> bool:
    """Whether this call is traced into a graph (the compiled op's turn), not run.

    Dynamo folds ``is_dynamo_compiling()`` to True where it traces.  Non-strict ``torch.export`` runs the code on
    fake tensors with ``is_compiling()`` set; that flag is global, held for a whole compile session, so a compile in
    another thread set it for every thread: the op's own eager call saw it and called the op again, a
    RecursionError in an eager model whose only fault was running while something else compiled."""
    if torch.compiler.is_dynamo_compiling():
        return True
    return torch.compiler.is_compiling() and not getattr(IN_OP, "running", False)


def _in_transform() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap, jvp) runs: its wrapper tensors (even ``x.detach()`` of a
    plain ``x`` under ``grad``) have no values NumPy can read."""
    return torch._C._functorch.maybe_current_level() is not None


def _batched(t: torch.Tensor) -> bool:
    """Whether ``t`` is a batched tensor of torch's own vmap (``torch.autograd.grad(..., is_grads_batched=True)`` and
    ``jacobian(..., vectorize=True)`` use it, not ``torch.func``'s): it has no values NumPy can read."""
    legacy = getattr(torch._C._functorch, "is_legacy_batchedtensor", None)
    return legacy is not None and bool(legacy(t))


def _np(t: torch.Tensor, dtype: str) -> np.ndarray:
    """A tensor as a NumPy array in the stack's dtype (bfloat16 via ml_dtypes, or float32)."""
    a = t.detach().to(torch.float32).contiguous().numpy()
    return a.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else a


def _torch(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(like.dtype)


def _t(op: Operand) -> Operand:
    """The transposed copy of a per-tensor FP8 operand (same codes, same scale)."""
    return op._replace(codes=np.ascontiguousarray(op.codes.T))


def _rows(op: Operand, m: int) -> Operand:
    """The first ``m`` rows of an input operand (K along axis 1), for diagnostics of a padded GEMM."""
    if op.kind == "hp":
        return op._replace(hp=op.hp[:m])
    rows = op.codes.shape[0] if op.kind == "fp8" else op.st.codes.shape[0]
    if m == rows:
        return op

    def cut(a):     # per-row scales (K-wise blocks of one row) lose the padded rows; one scale is kept
        a = np.asarray(a)
        return a[:m] if a.ndim == 2 and a.shape[0] == rows else a

    if op.kind == "fp8":
        return op._replace(codes=op.codes[:m], scale_inv=cut(op.scale_inv))
    st = op.st
    return op._replace(st=types.SimpleNamespace(
        codes=st.codes[:m], fmt=st.fmt, global_scale=st.global_scale, scale=cut(st.scale),
        scale_inv=cut(st.scale_inv), block=st.block, shape=(m,) + tuple(st.shape[1:])))


def frac_clipped(arr: np.ndarray, op: Operand) -> float:
    """Fraction of elements clipped: finite inputs beyond the largest value their scale lets the format
    hold by more than rounding accounts for (``|x| > (max + ulp(max) / 2) * scale_inv``), so that the
    saturating conversion, not rounding, set them to the format's maximum.

    Block scaling puts each block's largest element at (or next to) the format's maximum by design;
    those count in ``frac_saturated`` (codes at the maximum), not here.  NaN for unquantized operands.
    """
    if op.kind == "hp":
        return float("nan")
    x = np.abs(np.asarray(arr, np.float64))
    if op.kind == "fp8":
        fmt, inv = op.fmt, np.asarray(op.scale_inv, np.float64)
        if inv.ndim == 2:       # per-row / per-column / per-block scales, repeated over their elements
            reps = [-(-n // max(k, 1)) for n, k in zip(x.shape, inv.shape)]
            inv = np.repeat(np.repeat(inv, reps[0], axis=0), reps[1], axis=1)[:x.shape[0], :x.shape[1]]
    else:
        st = op.st
        fmt, inv = st.fmt, expand(np.asarray(st.scale_inv, np.float64), st.block, st.shape)
    top = float(fmt.max)
    half_ulp = 2.0 ** (np.floor(np.log2(top)) - fmt.mbits) / 2
    with np.errstate(invalid="ignore", over="ignore"):
        clipped = np.isfinite(x) & (x > (top + half_ulp) * inv)
    return float(clipped.sum() / max(x.size, 1))


def _acting_attribute(i, own, doc):
    """A layer attribute read as this call's (an autocast block's in this thread, else the layer's own, ``own``)."""
    def set_own(self, value):
        setattr(self, own, value)
    return property(lambda self: self._acting(i), set_own, doc=doc)


class EmulatedLinear(nn.Module):
    """An ``nn.Linear`` whose fprop, dgrad and wgrad are emulated FP8 / FP4 GEMMs.

    Built by :func:`fp8emu.torch.emulate`; shares the original layer's ``weight`` and
    ``bias`` parameters (float32 master weights: an optimizer built before the swap keeps
    working).

    Attributes
    ----------
    recipe : TrainingRecipe
    stack : Stack
    layer_name : str
    autocast_only : bool
        True: FP8 only inside :func:`fp8emu.torch.autocast` (Transformer Engine's rule), the plain
        ``nn.Linear`` outside it.
    diagnostics_enabled : bool
    diagnostic_rows : list of dict
    """

    def __init__(self, linear: nn.Linear, recipe: TrainingRecipe, stack: Stack, layer_name: str,
                 index: int, *, diagnostics: bool = False, seed: int = 0, multiple: int = 1,
                 autocast_only: bool = False):
        super().__init__()
        self.autocast_only = bool(autocast_only)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._recipe, self._stack, self.layer_name = recipe, stack, layer_name
        self.index, self.seed, self._multiple = index, int(seed), int(multiple)
        self.diagnostics_enabled = bool(diagnostics)
        self.diagnostic_rows = []
        self._register()
        self.register_buffer("fp8emu_step", torch.zeros((), dtype=torch.int64))
        if recipe.delayed():
            for role in _ROLES:
                self.register_buffer(f"amax_history_{role}",
                                     torch.zeros(recipe.amax_history_len, dtype=torch.float32))
                self.register_buffer(f"scale_{role}", torch.ones((), dtype=torch.float32))
        self._normal_buffers()

    def _normal_buffers(self):
        """The state buffers as normal tensors, never inference tensors.

        The layer advances them in place on every call; made under ``torch.inference_mode()`` (``emulate``, a deep
        copy, ``load_state_dict(..., assign=True)`` or ``to_empty`` inside such a block) they were inference
        tensors, and the next call outside the block was torch's "Inplace update to inference tensor outside
        InferenceMode is not allowed", where the plain ``nn.Linear`` runs.  A normal tensor can be updated in and
        out of inference mode."""
        with torch.inference_mode(False):
            for n, b in list(self._buffers.items()):
                if b is not None and b.is_inference():
                    self._buffers[n] = b.clone()

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._normal_buffers()          # assign=True takes the state dict's tensors themselves
        key, step = self._buffers.get("fp8emu_key"), self._buffers.get("fp8emu_step")
        if key is not None and key.is_meta and step is not None and not step.is_meta:
            # a layer built under torch.device("meta") and loaded with assign=True: its (non-persistent) key is in no
            # state dict and stayed meta, so the eager layer ran and the compiled one was refused with "input is a
            # meta tensor" (a CPU input).  Its value is the layer's own, known here
            self._buffers["fp8emu_key"] = torch.tensor(self._fp8emu_id, dtype=torch.int64, device=step.device)

    def _register(self):
        """Enter the registry the compiled op looks layers up in (a copy is a layer of its own).

        The key is a (non-persistent) buffer, not a Python int, so that a compiled graph takes it as an
        input and serves every model of the same shape without recompiling."""
        self._fp8emu_id = next(_KEYS)
        key = torch.tensor(self._fp8emu_id, dtype=torch.int64)
        if "fp8emu_key" in self._buffers:    # a copy: its own key (a shallow copy shares the buffer dict)
            self._buffers = dict(self._buffers, fp8emu_key=key)
        else:
            self.register_buffer("fp8emu_key", key, persistent=False)
        self.compiled_pending = {}      # compiled calls awaiting their backward: handle -> eager graph
        self.recompute_states = {}      # the last calls' inputs -> (state before, autocast block), for checkpointing
        LAYERS[self._fp8emu_id] = self

    def __getstate__(self):
        # a copy has its own pending compiled calls (none): the eager graphs kept for a compiled call's backward
        # hold non-leaf tensors, and copy.deepcopy of the model between such a forward and its backward was
        # torch's "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol"
        state = super().__getstate__()
        state["compiled_pending"], state["recompute_states"] = {}, {}
        return state

    def __setstate__(self, state):
        # a layer pickled before recipe, stack and multiple became properties held them under these names
        for k in ("recipe", "stack", "multiple"):
            if k in state:
                state["_" + k] = state.pop(k)
        super().__setstate__(state)
        self._register()
        self._normal_buffers()

    def __prepare_scriptable__(self):
        # torch.jit.script asks every module this before compiling it: an emulated model failed in TorchScript's
        # frontend on fp8emu's code ("NotSupportedError: Don't support conversion in JoinedStr", an f-string of
        # linear.py), where torch.jit.trace and torch.fx are each one error naming the layer
        raise TypeError(f"layer {self.layer_name!r}: torch.jit.script cannot compile an emulated layer, whose GEMMs "
                        "are NumPy calls on the tensors' values; use torch.compile or torch.export (one custom op "
                        "per layer)")

    def _acting(self, i):
        over = _ACTING.get()
        if over is not None and id(self) in over:
            return over[id(self)][i]
        return (self._recipe, self._stack, self._multiple)[i]

    recipe = _acting_attribute(0, "_recipe", "The recipe this call runs (an :func:`fp8emu.torch.autocast` block's in "
                                             "this thread), else the layer's (a :class:`TrainingRecipe`).")
    stack = _acting_attribute(1, "_stack", "The stack this call runs (an :func:`fp8emu.torch.autocast` block's in "
                                           "this thread), else the layer's (a :class:`Stack`).")
    multiple = _acting_attribute(2, "_multiple", "What the token count must be a multiple of, for this call's recipe "
                                                 "and stack.")

    def _apply(self, fn, recurse=True):
        # Module.to_empty remakes every buffer without its values (the meta-device initialization path:
        # emulate on "meta", to_empty, then load or initialize): the key then named no layer (the compiled op
        # raised a bare KeyError) and delayed scaling's history and scale were whatever memory held.  Such a
        # layer starts as a new one (a state dict loaded afterwards restores a saved state); .to() keeps values.
        # Delayed scaling's state stays float32 through model.to(dtype) / .half(), as TE's fp8_meta and the
        # fp8emu.torch.te modules' (model.half().float() had brought it back rounded to float16, silently)
        with float32_state(self):
            out = super()._apply(fn, recurse)
        self._normal_buffers()
        key = self._buffers.get("fp8emu_key")
        if key is not None and key.device.type != "meta" and int(key) != self._fp8emu_id:
            with torch.no_grad():
                key.fill_(self._fp8emu_id)
                self.fp8emu_step.zero_()
                if self.recipe.delayed():
                    for role in _ROLES:
                        getattr(self, f"amax_history_{role}").zero_()
                        getattr(self, f"scale_{role}").fill_(1.0)
        return out

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, recipe={self.recipe.name}, gpu={self.stack.name}")

    # ------------------------------------------------------------------ pieces used by the Function
    def rng(self, step: int, pass_: str) -> np.random.Generator:
        """The stochastic-rounding generator of one pass of one step (same seed, same bits)."""
        return np.random.default_rng([self.seed, self.index, step, _PASS_CODE[pass_]])

    def delayed_operand(self, role: str, arr: np.ndarray) -> Operand:
        """Quantize with the scale in force, record the amax, update (TE's order); state in buffers."""
        hist, scale = getattr(self, f"amax_history_{role}"), getattr(self, f"scale_{role}")
        odd = [(f"{n}_{role}", t.dtype) for n, t in (("amax_history", hist), ("scale", scale))
               if t.dtype != torch.float32]
        if odd:
            # named by the buffer that is not float32: a history alone in float64 (load_state_dict's assign=True)
            # read "converted to torch.float32 ...; keep the model in float32"
            raise TypeError(f"layer {self.layer_name!r}: delayed scaling's state was converted to {odd[0][1]} ("
                            f"{', '.join(f'{n} is {d}' for n, d in odd)}; load_state_dict with assign=True, or a "
                            "buffer assigned?); delayed scaling's amax history and scale are float32 (TE's fp8_meta; "
                            "model.to(dtype) keeps them so): load a state dict without assign=True, or convert them "
                            "back with .float()")
        ds = self.recipe.scaler(role)
        with STATE_LOCK, torch.no_grad():   # read, quantize, write back as one: two threads lost amax updates
            # the buffers read again under the lock: a recompute in another thread swaps them only under it
            hist, scale = getattr(self, f"amax_history_{role}"), getattr(self, f"scale_{role}")
            ds.amax_history = hist.numpy().astype(np.float32).copy()
            ds.scale = float(scale)
            st = ds.quantize(arr)
            hist.copy_(torch.from_numpy(ds.amax_history))
            scale.fill_(float(ds.scale))
        return Operand("fp8", st.codes, st.fmt, np.float32(st.scale_inv))

    def operand(self, role, arr, k_axis, pass_, step):
        if self.recipe.delayed():
            return self.delayed_operand(role, arr)
        return self.recipe.operand(role, arr, k_axis, pass_, rng=self.rng(step, pass_))

    def accumulator(self, pass_):
        return self.stack.accumulator(self.recipe.gemm_family(pass_), self.recipe.split(pass_))

    def torchao_emulate(self) -> bool:
        """Whether the GEMMs are torchao ``Float8Linear(emulate=True)``'s (its output dtype and bias rules)."""
        return self.accumulator("fprop") == TORCHAO_EMULATE

    def torch_cpu(self) -> bool:
        """Whether the layer runs on torch's own CPU paths (the ``cpu`` stack)."""
        return self.accumulator("fprop") in (TORCHAO_EMULATE, "torch-cpu")

    def bias_outside(self) -> bool:
        """torchao's ``Float8Linear`` adds its bias in torch after the GEMM (``output + bias``), so on
        torch's CPU the bias and its gradient are torch's own arithmetic."""
        return self.torchao_emulate() or (self.torch_cpu() and self.recipe.gemm_family("fprop").startswith("torchao"))

    def record(self, pass_, step, pairs, out, a_hp, b_hp, bias=None):
        """Diagnostics rows of one pass: one per operand, with the GEMM's relative error.

        ``bias``: the bias the GEMM added to ``out`` in its epilogue (fprop), added to the
        reference too (compared with the product alone, a bias counted as error)."""
        with np.errstate(all="ignore"):
            ref = a_hp.astype(np.float64) @ b_hp.astype(np.float64)
            if bias is not None:
                ref = ref + np.asarray(bias, np.float64).reshape(1, -1)
            o = np.asarray(out, np.float64)
            den = np.linalg.norm(ref)
            err = float(np.linalg.norm(o - ref) / den) if den > 0 else float("nan")
        for tensor, arr, op in pairs:
            stats = operand_stats(arr, op)
            # an NVFP4 copy quantized after the random Hadamard transform holds codes of the transformed
            # values, which this layer does not keep: their clipping is not measured
            rht = isinstance(self.recipe, TENVFP4BlockScaling) and self.recipe.quantizer(tensor, pass_).with_rht
            stats["frac_clipped"] = float("nan") if rht else frac_clipped(arr, op)
            self.diagnostic_rows.append({
                "layer": self.layer_name, "pass": pass_, "step": step, "tensor": tensor,
                **{k: stats[k] for k in ("amax", "scale", "frac_saturated", "frac_clipped", "frac_underflow",
                                         "frac_flushed", "n_nonfinite")},
                "gemm_rel_err": err})

    def records_autograd(self, x) -> bool:
        """Whether autograd records this call (its backward can run): grad mode on, outside inference mode (which
        records nothing whatever the grad mode: ``torch.enable_grad()`` inside it refused one-token inference with
        "run inference ... (torch.inference_mode())"), and the input or a parameter requiring grad."""
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return False
        return x.requires_grad or any(p is not None and p.requires_grad for p in (self.weight, self.bias))

    def check_tokens(self, m):
        mult = self.multiple
        if m % mult:
            raise ValueError(f"layer {self.layer_name!r}: {m} tokens (rows of the input) is not a multiple "
                             f"of {mult}, which recipe {self.recipe.name!r} on "
                             f"{self.stack.name!r} needs for its wgrad GEMM (K = tokens); pad the batch, or run "
                             "inference without autograd (torch.no_grad() or torch.inference_mode()), which "
                             "takes any count")

    def forward(self, input):
        # nn.Linear's parameter name: ``layer(input=x)``, which the plain layer takes, was Python's "forward() got an
        # unexpected keyword argument 'input'" once emulated
        x = input
        if isinstance(x, torch.Tensor) and (x.is_nested or x.layout != torch.strided):
            # a sparse or nested input has no one array of values: the recompute key's .contiguous() was torch's bare
            # "unsupported memory format option Contiguous" (nested: ".numpy() is not supported for tensor
            # subclasses"; compiled, the op's bare NotImplementedError); where the layer computes as the plain
            # nn.Linear, which takes them, it still does, else _forward's one error
            return self._dispatch(x)
        if COMPILED_FORWARD is not None and isinstance(x, torch.Tensor) and _traced():
            # one opaque op, which runs this eager call (same bits) and so its input checks, at run time:
            # an error raised while Dynamo traces would make it skip this code for good, and the later
            # (good) calls would then be traced from inside the layer, which Dynamo cannot
            return COMPILED_FORWARD(self, x)
        if isinstance(x, torch.fx.Proxy):
            # torch.fx.symbolic_trace traces into modules outside torch.nn: the input check below said "input must
            # be a float32, ... tensor, got Proxy", blaming the input
            raise TypeError(f"layer {self.layer_name!r}: torch.fx.symbolic_trace cannot trace into an emulated layer, "
                            "whose GEMMs are NumPy calls on the tensors' values; use torch.compile or torch.export "
                            "(one custom op per layer), or a torch.fx.Tracer whose is_leaf_module keeps EmulatedLinear "
                            "a call_module node")
        if not isinstance(x, torch.Tensor) or x.dtype not in FLOATS:
            # the output is cast to the input's dtype: an integer input would come back truncated
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"layer {self.layer_name!r}: input must be a float32, bfloat16, float16 or float64 "
                            f"tensor, got {got}")
        if x.device.type == "meta":
            raise ValueError(f"layer {self.layer_name!r}: input is a meta tensor (a shape without values); an "
                             "emulated layer computes on its input's values")
        if x.dim() == 0:
            # x.shape[-1] of a 0-D tensor was Python's bare "IndexError: tuple index out of range"
            raise ValueError(f"layer {self.layer_name!r}: input is a 0-D tensor (a scalar); a linear layer takes "
                             f"a tensor of at least 1 dimension whose last holds its {self.in_features} features")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"layer {self.layer_name!r}: input has {x.shape[-1]} features, "
                             f"expected {self.in_features}")
        # activation checkpointing (torch.utils.checkpoint) runs a forward again inside the backward: it must give
        # the first call's bits and leave the state as it was (it advanced the step counter, which seeds
        # stochastic rounding, and delayed scaling's amax twice, and quantized with the updated scale: other
        # gradients than without checkpointing)
        if _in_transform():
            # the recompute's key reads x's values, which a torch.func wrapper has not (the plain nn.Linear of an
            # autocast_only layer outside autocast runs under the transforms; the emulated GEMMs refuse them)
            return self._dispatch(x)
        key, inside = value_key(x), torch._C._current_graph_task_id() != -1
        if inside and key in self.recompute_states:
            return self._recompute(x, *self.recompute_states[key])
        if inside and self.recompute_states:
            # a recompute of a call older than the last kept ones runs as a new call: its state advances and
            # its output (and every later call's input in the segment) is not the forward's, silently
            warnings.warn(f"layer {self.layer_name!r}: a forward inside a backward (activation checkpointing's "
                          f"recompute) whose input is none of the layer's last {_RECOMPUTE_KEPT} calls' runs as a "
                          "new call: its step and scaling state advance and its gradients can differ from the "
                          f"same step without checkpointing (a segment calls this layer more than "
                          f"{_RECOMPUTE_KEPT} times, or its input changed since the forward)",
                          RuntimeWarning, stacklevel=2)
        if not inside:
            # under the state lock: two threads trimming at once popped one key twice (a bare KeyError of the key, or
            # "dictionary changed size during iteration")
            with STATE_LOCK:
                self.recompute_states[key] = (self._state_now(), AUTOCAST.get())
                while len(self.recompute_states) > _RECOMPUTE_KEPT:
                    self.recompute_states.pop(next(iter(self.recompute_states)))
        return self._dispatch(x)

    def state_buffers(self) -> dict:
        """The buffers of the layer's state (the step counter; delayed scaling's histories and scales), by name."""
        return {n: b for n, b in self._buffers.items() if n != "fp8emu_key" and b is not None}

    def _state_now(self) -> dict:
        return {n: b.detach().clone() for n, b in self.state_buffers().items()}

    def _recompute(self, x, saved, autocast_state):
        """The call as it ran first (its state and :func:`fp8emu.torch.autocast` block), the state left as it is."""
        rows = len(self.diagnostic_rows)
        token = AUTOCAST.set(autocast_state)
        try:
            # under the state lock: another thread's call meanwhile took its step from the replayed state and lost it
            # (and its amax record) when the layer's own came back, silently (audit27's open item)
            with STATE_LOCK, buffers_as(self, saved):
                return self._dispatch(x)
        finally:
            AUTOCAST.reset(token)
            del self.diagnostic_rows[rows:]

    def _dispatch(self, x):
        state = AUTOCAST.get()
        if state is None:
            if self.autocast_only:          # Transformer Engine's rule: FP8 only inside the context
                return torch.nn.functional.linear(x, self.weight, self.bias)
            return self._forward(x)
        if not state.enabled:               # outside FP8, as TE's modules outside fp8_autocast
            return torch.nn.functional.linear(x, self.weight, self.bias)
        with _acting_as(self, *state.resolve(self)):
            return self._forward(x)

    def _check_fits_float32(self, what, x):
        """A float64 tensor is computed in float32: a finite value beyond float32's range became Inf there, and
        the recipe then gave finite garbage (te-current: outputs near 864 for inputs near 1e39) or NaN.  ``what``:
        "input", or "its weight" / "its bias" / "its output gradient" (a float64 weight past float32 gave outputs
        near 274 and 448 where the product was near 1e39, a gradient of 1e39 input gradients near 6e3, silently)."""
        over = float32_overflow(x)
        if over is not None:
            fix = "scale the input, or leave" if what == "input" else "leave"
            raise ValueError(f"layer {self.layer_name!r}: {what} overflows float32, the type the layer computes "
                             f"in: {over[0]} finite float64 value(s) round to Inf in float32 (its largest "
                             f"finite value is {torch.finfo(torch.float32).max!r}; largest magnitude given "
                             f"{over[1]:.6g}); {fix} the "
                             "layer out of the emulation (module_filter_fn) to run it in float64")

    def _forward(self, x):
        if x.is_nested or x.layout != torch.strided:
            kind = "nested (torch.nested)" if x.is_nested else f"{x.layout} (sparse)"
            raise TypeError(f"layer {self.layer_name!r}: input is a {kind} tensor; an emulated layer's GEMMs are "
                            "NumPy calls on one dense array of values: pass a dense tensor (x.to_dense() of a sparse "
                            "one; a nested one's components one at a time)")
        if COMPILED_FORWARD is not None and _traced():
            # Dynamo started tracing here (it skips a frame that raised once and compiles the frames it
            # calls): the same opaque op as forward's
            return COMPILED_FORWARD(self, x)
        if _in_transform():
            # the NumPy GEMMs read the tensors' values: torch's "Cannot access data pointer of Tensor that doesn't
            # have storage"
            raise RuntimeError(f"layer {self.layer_name!r}: torch.func transforms (grad, vmap, jvp, jacrev, ...) "
                               "cannot run an emulated layer, whose GEMMs are NumPy calls on the tensors' values; "
                               "take gradients with ordinary autograd (loss.backward(), torch.autograd.grad) and "
                               "batch with a loop")
        if any(t is not None and forward_ad.unpack_dual(t).tangent is not None for t in (x, self.weight, self.bias)):
            # forward-mode AD (dual tensors, torch.autograd.forward_ad): torch's bare "You must implement the jvp
            # function for custom autograd.Function to use it with forward mode AD", where torch.func.jvp is named
            raise RuntimeError(f"layer {self.layer_name!r}: forward-mode AD (torch.autograd.forward_ad's dual "
                               "tensors) cannot run through an emulated layer, whose GEMMs are NumPy calls with no "
                               "tangent; take gradients with ordinary (reverse-mode) autograd (loss.backward(), "
                               "torch.autograd.grad)")
        if torch.jit.is_tracing():
            # the tracer cannot record the NumPy GEMMs: torch's bare "unordered_map::at"
            raise RuntimeError(f"layer {self.layer_name!r}: torch.jit.trace cannot record an emulated layer, whose "
                               "GEMMs are NumPy calls; use torch.compile or torch.export, which run it as one "
                               "custom op")
        odd = [f"{what} is {t.dtype}" for what, t in (("weight", self.weight), ("bias", self.bias))
               if t is not None and t.dtype not in FLOATS]
        if odd:
            # converted after emulate (model.to(torch.complex64)): the float32 cast dropped the imaginary part
            raise TypeError(f"layer {self.layer_name!r}: its {' and '.join(odd)}; an emulated layer's weight and "
                            "bias must be float32, bfloat16, float16 or float64 tensors")
        # a model built on the meta device and called before to_empty: NumPy's bare "can't convert meta device
        # type tensor to numpy", naming no layer
        refuse_meta_parameters(f"layer {self.layer_name!r}", self.weight, self.bias, self.state_buffers())
        dev = x.device.type
        if torch.is_autocast_enabled(dev) and x.dtype != torch.float64:
            # torch.autocast casts nn.Linear's input to its dtype (float64 excepted), so the output is in it
            x = x.to(torch.get_autocast_dtype(dev))
        if x.dtype == torch.float64:
            self._check_fits_float32("input", x)
        # a bias torchao adds after its GEMM is added in torch, in the output's dtype (float64 too): no float32 copy
        for what, t in (("weight", self.weight), ("bias", None if self.bias_outside() else self.bias)):
            if t is not None and t.dtype == torch.float64:
                self._check_fits_float32(f"its {what}", t)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] == 0:
            # no tokens: nn.Linear's empty output (and zero gradients), in the input's dtype as every other batch's
            # (F.linear of a float16 input and float32 weights was torch's "mat1 and mat2 must have the same dtype"
            # for the empty batch alone); the casts pass the zero gradients back in the weights' dtypes
            bias = None if self.bias is None else self.bias.to(x.dtype)
            return torch.nn.functional.linear(x, self.weight.to(x.dtype), bias)
        # without autograd (torch.no_grad, inference_mode, nothing requiring grad) only fprop runs and the
        # token count is no GEMM's K: any count is taken, padded with zero rows to the layer's multiple as
        # a kernel pads a partial tile (zero rows change no other row and no amax), so that the GEMM and
        # its scales have the shapes of training (one row would make block scales look per-tensor)
        rows = None
        if self.records_autograd(x):
            self.check_tokens(x2.shape[0])
        elif x2.shape[0] % self.multiple:
            rows = x2.shape[0]
            x2 = torch.cat([x2, x2.new_zeros((-rows) % self.multiple, self.in_features)])
        elif x2.shape[0]:
            rows = x2.shape[0]
        if self.bias_outside():
            # Float8Linear: the GEMM's output in the input's dtype, then ``output + bias.to(output.dtype)``
            # in torch (so the bias and its gradient are torch's own arithmetic)
            y = _LinearFunction.apply(x2, self.weight, None, self, rows)
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
        else:
            y = _LinearFunction.apply(x2, self.weight, self.bias, self, rows)
        if rows is not None:
            y = y[:rows]
        return y.reshape(*lead, self.out_features)


@contextlib.contextmanager
def _acting_as(layer, recipe, stack, multiple):
    """The layer runs ``recipe`` on ``stack`` for one call (an :func:`fp8emu.torch.autocast` override), in this
    thread or task only (a ContextVar: the layer itself is shared by every thread)."""
    token = _ACTING.set({**(_ACTING.get() or {}), id(layer): (recipe, stack, multiple)})
    try:
        yield
    finally:
        _ACTING.reset(token)


def refuse_meta_parameters(owner, weight, bias, buffers=None):
    """One ValueError naming ``owner``'s weight and / or bias where they are meta tensors (a shape without values),
    else its state ``buffers`` (name -> tensor) that are, and what to do; nothing where all have values.  The eager
    layer and the compiled op both call it."""
    meta = [what for what, t in (("weight", weight), ("bias", bias)) if t is not None and t.is_meta]
    if meta:
        are = "are meta tensors" if len(meta) > 1 else "is a meta tensor"
        raise ValueError(f"{owner}: its {' and '.join(meta)} {are} (a shape without values): a model built on the "
                         "meta device needs model.to_empty(device=...) and its weights loaded (load_state_dict) or "
                         "initialized before it is called")
    late = [n for n, t in (buffers or {}).items() if t is not None and t.is_meta]
    if late:
        # weights loaded into a model emulated on the meta device (load_state_dict(..., assign=True) of a checkpoint
        # without the layer's state): the step counter was read with torch's bare "Tensor.item() cannot be called on
        # meta tensors", naming no layer
        names = late[0] if len(late) == 1 else f"{', '.join(late[:-1])} and {late[-1]}"
        are = "are meta tensors" if len(late) > 1 else "is a meta tensor"
        raise ValueError(f"{owner}: its {names} {are} (state buffers without values: weights loaded with "
                         "load_state_dict(..., assign=True) into a model emulated on the meta device, from a checkpoint "
                         "without the layer's state?); call model.to_empty(device=...) before loading the weights, or "
                         "emulate the model after loading them")


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer, rows=None):
        """``rows``: None when autograd will call backward; else forward only, the first ``rows`` of
        ``x``'s rows real (the rest zero padding)."""
        R, S = layer.recipe, layer.stack
        with STATE_LOCK:    # the counter looked up under the lock too: a recompute in another thread swaps it under it
            step = take_step(layer.fp8emu_step, f"layer {layer.layer_name!r}")
        xs = _np(x, S.dtype)
        w = weight.detach().to(torch.float32).contiguous().numpy()
        a = layer.operand("input", xs, 1, "fprop", step)
        b = layer.operand("weight", w.T, 0, "fprop", step)
        bias_np = None if bias is None else np.asarray(_np(bias, S.dtype), np.float32)
        y = run_gemm(a, b, layer.accumulator("fprop"), S.dtype, bias_np, layout=_MM_LAYOUT["fprop"],
                     fast_accum=True)          # torchao: use_fast_accum for the output GEMM only
        if rows is not None:        # forward only: no copies for backward GEMMs that will not run
            if layer.diagnostics_enabled:   # of the real rows (padding would dilute the fractions)
                layer.record("fprop", step, [("input", xs[:rows], _rows(a, rows)), ("weight", w.T, b)], y[:rows],
                             np.asarray(xs[:rows], np.float32), w.T, bias_np)
            return _torch(y, x)
        shared = R.shared_copies()
        # the backward GEMMs' copies, quantized now from the high-precision tensors (as TE)
        if R.high_precision("wgrad"):
            x_col = Operand("hp", hp=np.asarray(xs, np.float32))
        else:
            x_col = a if shared else R.operand("input", xs, 0, "wgrad", rng=layer.rng(step, "wgrad"))
        w_col = _t(b) if shared else R.operand("weight", w, 0, "dgrad", rng=layer.rng(step, "dgrad"))
        if layer.diagnostics_enabled:
            layer.record("fprop", step, [("input", xs, a), ("weight", w.T, b)], y,
                         np.asarray(xs, np.float32), w.T, bias_np)
        ctx.layer, ctx.step, ctx.x_col, ctx.w_col = layer, step, x_col, w_col
        ctx.acting = (layer.recipe, layer.stack, layer.multiple)
        ctx.xs, ctx.w = (xs, w) if layer.diagnostics_enabled else (None, None)
        ctx.has_bias = bias is not None
        return _torch(y, x)

    @staticmethod
    def backward(ctx, dy):
        if _in_transform() or _batched(dy):
            # a batched backward runs this under vmap, whose batched gradient NumPy cannot read: torch's bare
            # "Batching rule not implemented for aten::detach; the fallback path doesn't work on out= or view ops"
            raise RuntimeError(f"layer {ctx.layer.layer_name!r}: a batched backward (torch.autograd.grad(..., "
                               "is_grads_batched=True), torch.autograd.functional.jacobian(..., vectorize=True)) cannot "
                               "run an emulated layer's backward, whose GEMMs are NumPy calls on the tensors' values; "
                               "take the gradients one output gradient at a time (a loop, or vectorize=False)")
        if dy.dtype == torch.float64:       # a float64 model's gradient, computed in float32 as the input is
            ctx.layer._check_fits_float32("its output gradient", dy)
        # the recipe and stack the forward ran with (an autocast block may have ended since)
        with torch.no_grad(), _acting_as(ctx.layer, *ctx.acting):
            grads = _LinearFunction._backward(ctx, dy)
        return first_order_only(f"layer {ctx.layer.layer_name!r}", grads)

    @staticmethod
    def _backward(ctx, dy):
        layer, step = ctx.layer, ctx.step
        R, S = layer.recipe, layer.stack
        dys = _np(dy, S.dtype)
        shared = R.shared_copies()
        a = layer.operand("grad_output", dys, 1, "dgrad", step)
        dx = run_gemm(a, ctx.w_col, layer.accumulator("dgrad"), S.dtype, layout=_MM_LAYOUT["dgrad"])
        if R.high_precision("wgrad"):
            if dy.dtype != torch.float32 and layer.torchao_emulate():
                warnings.warn(f"layer {layer.layer_name!r}: torchao's high-precision wgrad of {dy.dtype} tensors is "
                              "torch's own low-precision mm (oneDNN), emulated here as a float32 sgemm of the "
                              "same values: a few outputs may differ from torchao's in the last bit",
                              RuntimeWarning, stacklevel=2)
            a2 = Operand("hp", hp=np.ascontiguousarray(np.asarray(dys, np.float32).T))
        else:
            a2 = _t(a) if shared else R.operand("grad_output", dys.T, 1, "wgrad", rng=layer.rng(step, "wgrad"))
        dw = run_gemm(a2, ctx.x_col, layer.accumulator("wgrad"), "float32", layout=_MM_LAYOUT["wgrad"])
        if layer.diagnostics_enabled:
            dyf = np.asarray(dys, np.float32)
            layer.record("dgrad", step, [("grad_output", dys, a), ("weight", ctx.w, ctx.w_col)], dx,
                         dyf, ctx.w)
            layer.record("wgrad", step, [("grad_output", dys.T, a2), ("input", ctx.xs, ctx.x_col)], dw,
                         dyf.T, np.asarray(ctx.xs, np.float32))
        if not ctx.has_bias:
            db = None
        elif layer.torch_cpu():
            db = dy.sum(0)                  # torch's CPU: autograd's bias gradient is torch's own reduction
        else:
            db = _torch(np.asarray(dys, np.float32).sum(axis=0, dtype=np.float32), dy)
        # torchao returns grad_weight in the gradient's dtype; autograd converts it to the weight's
        dw_t = _torch(dw, dy).to(layer.weight.dtype) if layer.torchao_emulate() else _torch(dw, layer.weight)
        return _torch(dx, dy), dw_t, db, None, None
