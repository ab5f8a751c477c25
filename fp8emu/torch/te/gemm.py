"""The quantized GEMMs of the TE modules: one linear map's fprop, dgrad and wgrad, emulated.

Each quantizer and GEMM is a call of :mod:`fp8emu.training` (the operands, per recipe, as
Transformer Engine quantizes them: per-tensor copies shared by the backward GEMMs, block copies
quantized from the high-precision tensor) and :func:`fp8emu.torch.gemms.run_gemm` (the stack's
accumulators), the machinery :class:`fp8emu.torch.EmulatedLinear` runs on.  What this module adds is
where a tensor is rounded before it is quantized: ``round_x`` / ``round_dy`` False means the tensor
goes straight from float32 to FP8, as TE's fused norm and activation kernels write it (see
:mod:`fp8emu.torch.te.modules`); True means it is first rounded to the stack's activation dtype
(bfloat16 on GPU stacks), as an unfused kernel's output is.  It also holds the quantized copy of an
FP8 primary weight (:func:`fp8emu.torch.te.quantized_model_init`) and TE's weight cache across
micro-batches (``is_first_microbatch``).

Delayed-scaling state (amax history and scale of each operand) and the step counter that seeds
stochastic rounding are buffers of a :class:`QuantGemm`, so they are in the module's ``state_dict``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import ml_dtypes
import numpy as np
import torch
from torch import nn

from ...codec import decode
from ...training import PASSES, Operand
from ..gemms import STATE_LOCK, buffers_as, first_order_only, float32_state, run_gemm, take_step, value_key
from ..tensors import float32_overflow

__all__ = ["QuantGemm", "GemmPlan", "quantized_linear", "round_to_stack", "stack_multiple", "check_input",
           "check_fits_float32", "primary_key", "RecomputeFrame", "recompute_scope"]

_ROLES = ("input", "weight", "grad_output")
_PASS_CODE = {"fprop": 0, "dgrad": 1, "wgrad": 2}


def stack_multiple(recipe, stack) -> int:
    """What features and tokens must be multiples of for ``recipe`` on ``stack`` (TE asserts 16 for FP8).

    Examples
    --------
    >>> from fp8emu.torch import get_recipe, get_stack
    >>> stack_multiple(get_recipe("te-current"), get_stack("h100")), stack_multiple(get_recipe("te-nvfp4"),
    ...                                                                             get_stack("b200"))
    (16, 64)
    """
    m = recipe.multiple
    for p in PASSES:
        if not recipe.high_precision(p):
            k = stack.multiple(recipe.family)
            m = m * k // math.gcd(m, k)
    return m


def _np(t: torch.Tensor, dtype: str) -> np.ndarray:
    """A tensor as a NumPy array in ``dtype``: a bfloat16 array (ml_dtypes) tells the quantizers their input
    is bfloat16 (NVFP4's Hadamard transform computes in the input's dtype, as TE's kernel)."""
    a = t.detach().to(torch.float32).contiguous().numpy()
    return a.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else a


def _torch(a: np.ndarray, dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(dtype)


def _t(op: Operand) -> Operand:
    return op._replace(codes=np.ascontiguousarray(op.codes.T))


class _RoundST(torch.autograd.Function):
    """Values rounded to bfloat16 (kept in the tensor's dtype); the gradient passes through."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def round_to_stack(x: torch.Tensor, stack) -> torch.Tensor:
    """``x`` as a tensor of the stack's activation dtype holds it (bfloat16 values on GPU stacks), in
    ``x``'s dtype; the gradient passes through unchanged.

    Examples
    --------
    >>> from fp8emu.torch import get_stack
    >>> round_to_stack(torch.tensor([1 + 2**-10]), get_stack("h100")).item()
    1.0
    """
    return _RoundST.apply(x) if stack.dtype == "bfloat16" else x


def dequantize_operand(op: Operand, shape) -> np.ndarray:
    """The values an operand's codes and scales stand for (float32, the operand's GEMM layout)."""
    if op.kind == "block":
        return op.st.dequantize(np.float32)
    v = decode(op.codes, op.fmt).astype(np.float32)
    s = np.asarray(op.scale_inv, np.float32)
    if s.size > 1:
        # block scales cover 1 or 128 elements per axis (TE's 1x128 / 128x128 blocks)
        for ax in (0, 1):
            if s.shape[ax] != shape[ax]:
                s = np.repeat(s, 128, axis=ax)
        s = s[:shape[0], :shape[1]]
    return (v * s).astype(np.float32)


def primary_key(weight: torch.Tensor) -> tuple:
    """The key of an FP8 primary weight's quantized copy: the master weight's values (a digest of its bytes).

    Its version counter missed writes through ``.data`` (``p.data.clamp_(...)``, ``p.data = ...``), after which
    the forward computed with the old weight's copy, silently."""
    return ("primary", *value_key(weight))


class QuantGemm(nn.Module):
    """The quantization state of one linear map of a TE module (a sub-module holding buffers only).

    ``fp8emu_step`` counts forward passes and ``fp8emu_seed`` (drawn from torch's generator when the
    module is built, as TE draws its stochastic-rounding state from torch's: a model built after
    ``torch.manual_seed`` rounds the same way every run) seeds stochastic rounding with it; delayed
    scaling adds ``amax_history_<role>`` and ``scale_<role>`` when it first runs.
    """

    _mb_key = None      # a module pickled before the attribute existed

    def __init__(self, name: str):
        super().__init__()
        self.gemm_name = name
        self.register_buffer("fp8emu_step", torch.zeros((), dtype=torch.int64))
        self.register_buffer("fp8emu_seed", torch.randint(0, 2**62, (), dtype=torch.int64))
        self.primary = None          # (recipe, stack) of an FP8 primary weight, else None
        self._weight_copy = None     # (key, fprop operand, dgrad operand)
        self._mb_key = None          # the weight copy's key across micro-batches (is_first_microbatch)

    def snapshot(self):
        """What a call reads and advances: its buffers (copies), the weight copy and its micro-batch key."""
        return ({n: b.detach().clone() for n, b in self._buffers.items() if b is not None},
                self._weight_copy, self._mb_key)

    @contextlib.contextmanager
    def state_as(self, snap):
        """Inside the block the GEMM runs with the state of ``snap`` (:meth:`snapshot`); after it its own
        state is back, whatever the block advanced."""
        kept = (self._weight_copy, self._mb_key)
        self._weight_copy, self._mb_key = snap[1], snap[2]
        try:
            with buffers_as(self, snap[0], others_absent=True):
                yield
        finally:
            self._weight_copy, self._mb_key = kept

    def _apply(self, fn, recurse=True):
        # Module.to_empty (the meta-device path: build under torch.device("meta"), to_empty, then load or
        # initialize) remakes the buffers without values: the step counter and the seed were whatever memory held
        # (a seed like 94598123463712, so a model built after torch.manual_seed no longer rounded the same way each
        # run).  Only to_empty takes a meta tensor to a device (.to() cannot copy out of meta): such a GEMM starts
        # as a new one, its seed drawn from torch's generator as at construction; a state dict loaded afterwards
        # restores a saved state.
        was_meta = self.fp8emu_step.is_meta
        # delayed scaling's state stays float32 through model.to(dtype) / .half() / .bfloat16(), as TE's fp8_meta
        with float32_state(self):
            out = super()._apply(fn, recurse)
        if was_meta and not self.fp8emu_step.is_meta:
            with torch.no_grad():
                self.fp8emu_step.zero_()
                self.fp8emu_seed.copy_(torch.randint(0, 2**62, (), dtype=torch.int64))
                for role in _ROLES:
                    if getattr(self, f"amax_history_{role}", None) is not None:
                        getattr(self, f"amax_history_{role}").zero_()
                        getattr(self, f"scale_{role}").fill_(1.0)
            self._weight_copy = None
        return out

    def rng(self, step, pass_):
        seed = int(self.fp8emu_seed)
        if seed < 0:
            # a corrupt or hand-edited state dict: NumPy's bare "expected non-negative integer" otherwise
            raise ValueError(f"GEMM {self.gemm_name!r}: its stochastic-rounding seed (the fp8emu_seed buffer, saved in "
                             f"its state dict) is {seed}; it must be >= 0: load a state dict an emulated module saved")
        return np.random.default_rng([seed, step, _PASS_CODE[pass_]])

    def next_step(self) -> int:
        with STATE_LOCK:            # a buffer replaced by another thread between its read and its increment
            self._normal_buffers()
            return take_step(self.fp8emu_step, f"GEMM {self.gemm_name!r}")

    def _normal_buffers(self):
        """The state buffers as normal tensors, never inference tensors (``EmulatedLinear._normal_buffers``).

        A call advances them in place; made under ``torch.inference_mode()`` (a model built, loaded with
        ``assign=True`` or copied there, or delayed scaling's first call there) they were inference tensors, and
        the next call outside the block was torch's "Inplace update to inference tensor outside InferenceMode is
        not allowed".  Here, before every call's first update, whatever made them."""
        with torch.inference_mode(False):
            for n, b in list(self._buffers.items()):
                if b is not None and b.is_inference():
                    self._buffers[n] = b.clone()

    def _delayed_state(self, recipe, role):
        hist = getattr(self, f"amax_history_{role}", None)
        if hist is None or hist.numel() != recipe.amax_history_len:
            # TE re-creates a module's scaling state when the recipe's history length changes
            self.register_buffer(f"amax_history_{role}", torch.zeros(recipe.amax_history_len, dtype=torch.float32))
            self.register_buffer(f"scale_{role}", torch.ones((), dtype=torch.float32))
        return getattr(self, f"amax_history_{role}"), getattr(self, f"scale_{role}")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # delayed-scaling state saved by a module that ran delayed scaling: made here before it is loaded
        for role in _ROLES:
            hist = state_dict.get(f"{prefix}amax_history_{role}")
            if hist is not None and getattr(self, f"amax_history_{role}", None) is None:
                self.register_buffer(f"amax_history_{role}", torch.zeros_like(hist, dtype=torch.float32))
                self.register_buffer(f"scale_{role}", torch.ones((), dtype=torch.float32))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def operand(self, recipe, role, arr, k_axis, pass_, step) -> Operand:
        """``arr`` quantized as ``role`` of ``pass_``; delayed scaling quantizes with the scale in force,
        records the amax and updates the scale (TE's order), its state in this module's buffers."""
        if not recipe.delayed():
            return recipe.operand(role, arr, k_axis, pass_, rng=self.rng(step, pass_))
        # the state made, read, quantized with and written back as one (EmulatedLinear's lock): a module shared by
        # threads kept 157 of 240 amax values, and a thread read scale_input before another had registered it
        # (AttributeError), silently or not
        with STATE_LOCK:
            return self._delayed_operand(recipe, role, arr)

    def _delayed_operand(self, recipe, role, arr) -> Operand:
        hist, scale = self._delayed_state(recipe, role)
        odd = [f"{n}_{role} is {t.dtype}" for n, t in (("amax_history", hist), ("scale", scale))
               if t.dtype != torch.float32]
        if odd:
            # only a state dict loaded with assign=True brings another dtype (model.to(dtype) keeps float32)
            raise TypeError(f"GEMM {self.gemm_name!r}: delayed scaling's state must be float32, as TE keeps it "
                            f"({', '.join(odd)}; load_state_dict with assign=True?); load it without assign=True")
        ds = recipe.scaler(role)
        ds.amax_history = hist.numpy().astype(np.float32).copy()
        ds.scale = float(scale)
        st = ds.quantize(arr)
        with torch.no_grad():
            hist.copy_(torch.from_numpy(ds.amax_history))
            scale.fill_(float(ds.scale))
        return Operand("fp8", st.codes, st.fmt, np.float32(st.scale_inv))

    def weight_operands(self, recipe, weight: torch.Tensor, step: int):
        """The fprop (``W^T``, K = in_features) and dgrad (``W``, K = out_features) copies of the weight,
        quantized from its float32 values (TE quantizes the parameter, not a bfloat16 copy)."""
        check_fits_float32(self.gemm_name, "its weight", weight)
        w = weight.detach().to(torch.float32).contiguous().numpy()
        b = self.operand(recipe, "weight", w.T, 0, "fprop", step)
        if recipe.shared_copies():
            return b, _t(b)
        return b, recipe.operand("weight", w, 0, "dgrad", rng=self.rng(step, "dgrad"))

    def cached_weight(self, recipe, weight, step, key):
        """The weight's copies, re-quantized only when ``key`` changes (an FP8 primary weight: the
        master's version; TE's micro-batch cache: the first micro-batch's step)."""
        if self._weight_copy is None or self._weight_copy[0] != key:
            self._weight_copy = (key, *self.weight_operands(recipe, weight, step))
        return self._weight_copy[1:]

    def dequantized_weight(self, weight) -> torch.Tensor:
        """An FP8 primary weight as its quantized copy's values (what TE's FP8 parameter holds)."""
        recipe, _ = self.primary
        b, _ = self.cached_weight(recipe, weight, int(self.fp8emu_step), primary_key(weight))
        return _torch(dequantize_operand(b, (weight.shape[1], weight.shape[0])).T, weight.dtype)


class RecomputeFrame:
    """One :func:`fp8emu.torch.te.checkpoint` segment: the GEMM state each TE module ran each of its calls with in
    the segment's forward, in order (TE keeps delayed scaling's amax history and scale so, one queue per module:
    ``FP8GlobalStateManager.copy_forward_fp8_meta_tensors_for_recompute``), which the recompute replays."""

    def __init__(self):
        self.saved = {}


#: The segments being run, innermost last: (frame, None) while its forward records, (frame, {module: calls
#: replayed}) while it is recomputed.
_FRAMES = contextvars.ContextVar("fp8emu_te_checkpoint", default=())


@contextlib.contextmanager
def in_frame(frame: RecomputeFrame, recompute: bool):
    """The block is ``frame``'s forward (its modules' calls recorded) or, ``recompute``, its recompute (each call
    runs with the state the forward's call ran with, which it leaves as it was)."""
    token = _FRAMES.set(_FRAMES.get() + ((frame, {} if recompute else None),))
    try:
        yield
    finally:
        _FRAMES.reset(token)


@contextlib.contextmanager
def recompute_scope(owner, gemms):
    """A call of the TE module ``owner`` (its :class:`QuantGemm` s ``gemms``) inside checkpointed segments.

    In a segment's forward its state before the call is recorded; in a recompute the call runs with the state
    the same call of the forward ran with (the recompute's n-th call of ``owner`` is the forward's n-th), and
    the state is left as it was: TE's recompute quantizes with the scales of the first forward and updates no
    amax history (``get_old_fp8_meta_tensors_for_recompute``, ``restore_fp8_meta_tensors``), and draws the
    stochastic-rounding bits of the first forward (its RNG state is restored; here the step that seeds them).
    A segment run inside another's recompute records the state replayed from the outer one."""
    frames = _FRAMES.get()
    if not frames or not gemms:
        yield
        return
    # the whole call under the state lock: a recompute puts the forward's state in the module's buffers for the call,
    # and a forward's record must be the state its call runs with.  Another thread calling the module meanwhile took
    # its step from the replayed state, and lost it when the module's own came back (38 of 45 steps kept, delayed
    # scaling's amax records with them), silently; or advanced it between the record and the call
    with STATE_LOCK:
        with _replayed(owner, gemms, frames):
            yield


@contextlib.contextmanager
def _replayed(owner, gemms, frames):
    last = max((i for i, (_, replayed) in enumerate(frames) if replayed is not None), default=-1)
    if last >= 0:
        frame, replayed = frames[last]
        calls = frame.saved.get(owner, [])
        n = replayed.get(owner, 0)
        if n >= len(calls):
            raise RuntimeError(f"checkpoint: the recompute calls {type(owner).__name__} more often than the "
                               f"checkpointed forward did ({len(calls)} time(s)); the function must make the same "
                               "module calls each time it runs (TE: identical behaviour in the forward and the "
                               "backward pass)")
        replayed[owner] = n + 1
        state = calls[n]
    else:
        state = tuple(g.snapshot() for g in gemms)
    for frame, _ in frames[last + 1:]:
        frame.saved.setdefault(owner, []).append(state)
    with contextlib.ExitStack() as stack:
        if last >= 0:
            for g, snap in zip(gemms, state):
                stack.enter_context(g.state_as(snap))
        yield


class GemmPlan:
    """What one call runs: the :class:`QuantGemm`, recipe, stack, where tensors are rounded, the weight copies."""

    __slots__ = ("gemm", "recipe", "stack", "round_x", "round_dy", "weight_key", "name")

    def __init__(self, gemm, recipe, stack, *, round_x=True, round_dy=True, weight_key=None, name=""):
        self.gemm, self.recipe, self.stack = gemm, recipe, stack
        self.round_x, self.round_dy, self.weight_key, self.name = round_x, round_dy, weight_key, name


class _QuantizedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, plan):
        g, R, S = plan.gemm, plan.recipe, plan.stack
        step = g.next_step()
        xs = _np(x, S.dtype if plan.round_x else "float32")
        a = g.operand(R, "input", xs, 1, "fprop", step)
        if plan.weight_key is None:
            b, w_col = g.weight_operands(R, weight, step)
        else:
            b, w_col = g.cached_weight(R, weight, step, plan.weight_key)
        bias_np = None if bias is None else np.asarray(_np(bias, S.dtype), np.float32)
        y = run_gemm(a, b, S.accumulator(R.gemm_family("fprop"), R.split("fprop")), S.dtype, bias_np)
        if any(ctx.needs_input_grad[:2]):
            # the wgrad copy, quantized now from the same values (as TE's quantizers write both usages)
            ctx.x_col = a if R.shared_copies() else R.operand("input", xs, 0, "wgrad", rng=g.rng(step, "wgrad"))
        ctx.plan, ctx.step, ctx.w_col, ctx.x_dtype = plan, step, w_col, x.dtype
        ctx.has_bias, ctx.w_dtype = bias is not None, weight.dtype
        return _torch(y, x.dtype)

    @staticmethod
    def backward(ctx, dy):
        with torch.no_grad():
            grads = _QuantizedLinear._backward(ctx, dy)
        return first_order_only(ctx.plan.name or ctx.plan.gemm.gemm_name, grads)

    @staticmethod
    def _backward(ctx, dy):
        plan, step = ctx.plan, ctx.step
        g, R, S = plan.gemm, plan.recipe, plan.stack
        check_fits_float32(plan.name or g.gemm_name, "its output gradient", dy)
        dys = _np(dy, S.dtype if plan.round_dy else "float32")
        a = g.operand(R, "grad_output", dys, 1, "dgrad", step)
        dx = run_gemm(a, ctx.w_col, S.accumulator(R.gemm_family("dgrad"), R.split("dgrad")), S.dtype)
        dw = None
        if ctx.needs_input_grad[1]:
            a2 = _t(a) if R.shared_copies() else R.operand("grad_output", dys.T, 1, "wgrad", rng=g.rng(step, "wgrad"))
            dw = _torch(run_gemm(a2, ctx.x_col, S.accumulator(R.gemm_family("wgrad"), R.split("wgrad")), "float32"),
                        ctx.w_dtype)
        if not ctx.has_bias:
            db = None
        elif S.accumulator(R.gemm_family("fprop"), R.split("fprop")) == "torch-cpu":
            db = dy.sum(0)          # torch's CPU: the bias gradient is torch's own reduction (as EmulatedLinear)
        else:
            db = _torch(np.asarray(dys, np.float32).sum(axis=0, dtype=np.float32), dy.dtype)
        return _torch(dx, ctx.x_dtype), dw, db, None


_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def check_input(owner: str, x, features: int) -> None:
    """One error naming what an FP8 (``autocast``) call of ``owner`` cannot take as its input ``x``.

    Outside ``autocast`` torch's own functions refuse such inputs; inside, the NumPy GEMMs took an integer
    input and cast the output back to it (truncated: zeros), computed a float64 input beyond float32's range
    as Inf (finite garbage out), and raised NumPy's "shape mismatch" for a wrong feature count, Python's
    "tuple index out of range" for a 0-D input, and torch's messages about NumPy for a meta tensor or under a
    ``torch.func`` transform.

    Examples
    --------
    >>> check_input("Linear.gemm", torch.ones(16, 48), 64)
    Traceback (most recent call last):
    ...
    ValueError: Linear.gemm: input has 48 features, expected 64
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOATS:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{owner}: input must be a float32, bfloat16, float16 or float64 tensor, got {got}")
    if x.device.type == "meta":
        raise ValueError(f"{owner}: input is a meta tensor (a shape without values); the emulated GEMMs compute "
                         "on its values")
    if torch._C._functorch.maybe_current_level() is not None:
        raise RuntimeError(f"{owner}: torch.func transforms (grad, vmap, jvp, jacrev, ...) cannot run the emulated "
                           "GEMMs, which are NumPy calls on the tensors' values; use ordinary autograd")
    if torch.jit.is_tracing():
        raise RuntimeError(f"{owner}: torch.jit.trace cannot record the emulated GEMMs, which are NumPy calls")
    if x.dim() == 0:
        raise ValueError(f"{owner}: input is a 0-D tensor (a scalar); it takes a tensor whose last dimension holds "
                         f"its {features} features")
    if x.shape[-1] != features:
        raise ValueError(f"{owner}: input has {x.shape[-1]} features, expected {features}")
    check_fits_float32(owner, "input", x)


def check_fits_float32(owner: str, what: str, t) -> None:
    """One error where a float64 tensor ``t`` (``what``: "input", "its weight", "its bias", "its output gradient",
    "its layer_norm_weight", ...) holds finite values that float32, the type the emulated GEMMs and norms compute
    in, rounds to Inf.  The float32 copy was Inf and the recipe gave finite garbage: a float64 ``te.Linear`` whose
    weight held -1e39 gave -448 (E4M3's largest) where the product was near -1e39, a gradient of 1e39 input
    gradients near 1e3, silently.

    Examples
    --------
    >>> check_fits_float32("Linear.gemm", "its weight", torch.tensor([1e39], dtype=torch.float64))
    Traceback (most recent call last):
    ...
    ValueError: Linear.gemm: its weight overflows float32, the type the emulated GEMMs compute in: 1 finite float64 value(s) round to Inf in float32 (largest magnitude given 1e+39); scale it, or run the module outside autocast
    """
    over = float32_overflow(t)
    if over is not None:
        fix = {"input": "scale the input", "its output gradient": "scale the loss"}.get(
            what, "scale it, or run the module outside autocast")
        raise ValueError(f"{owner}: {what} overflows float32, the type the emulated GEMMs compute in: "
                         f"{over[0]} finite float64 value(s) round to Inf in float32 (largest magnitude "
                         f"given {over[1]:.6g}); {fix}")


def quantized_linear(x: torch.Tensor, weight: torch.Tensor, bias, plan: GemmPlan) -> torch.Tensor:
    """``x @ weight.T + bias`` with the three GEMMs quantized as ``plan`` says; ``x`` is (..., in_features).

    Examples
    --------
    >>> from fp8emu.torch import get_recipe, get_stack
    >>> g = QuantGemm("demo")
    >>> x, w = torch.ones(16, 32), torch.full((16, 32), 0.5)
    >>> quantized_linear(x, w, None, GemmPlan(g, get_recipe("te-current"), get_stack("h100")))[0, :3].tolist()
    [16.0, 16.0, 16.0]
    """
    R, S = plan.recipe, plan.stack
    check_input(plan.name or plan.gemm.gemm_name, x, weight.shape[1])
    for what, t in (("its weight", weight), ("its bias", bias)):      # the bias: added in float32 in the epilogue
        check_fits_float32(plan.name or plan.gemm.gemm_name, what, t)     # before the step is taken
    m = stack_multiple(R, S)
    tokens = x.numel() // max(x.shape[-1], 1)
    for what, v in (("in_features", weight.shape[1]), ("out_features", weight.shape[0]), ("tokens", tokens)):
        if v % m:
            raise ValueError(f"{plan.name or plan.gemm.gemm_name}: {what} {v} is not a multiple of {m}, which "
                             f"{R.name} on {S.name} needs (TE asserts the same for FP8 GEMMs); pad the batch or "
                             "choose other sizes")
    y = _QuantizedLinear.apply(x.reshape(-1, x.shape[-1]), weight, bias, plan)
    return y.reshape(*x.shape[:-1], weight.shape[0])
