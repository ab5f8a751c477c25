"""One GEMM pass of an emulated linear layer: quantized operands into the stack's GEMM model."""

from __future__ import annotations

import contextlib
import hashlib
import threading

import numpy as np
import torch

from ..codec import decode
from ..gemm.quantized import quantized_mm
from ..training.recipes import Operand

__all__ = ["run_gemm", "operand_stats", "first_order_only", "value_key", "take_step", "buffers_as", "float32_state",
           "STATE_LOCK"]

#: Held while a layer's state (its step counter, delayed scaling's history and scale) is read and written back:
#: one layer called from several threads at once read one step twice (two calls, one stochastic-rounding seed,
#: a step never taken) and lost amax updates, silently.
STATE_LOCK = threading.RLock()


def run_gemm(a: Operand, b: Operand, accumulator, out_dtype, bias=None, layout="NN", fast_accum=False) -> np.ndarray:
    """``A @ B`` (+ bias) of two quantized operands with the stack's accumulator:
    :func:`fp8emu.gemm.quantized.quantized_mm` with what torch knows here (its thread count, which the
    order of its CPU sgemm depends on, and whether oneDNN is on, which picks the path of torch's CPU
    ``_scaled_mm``)."""
    mkldnn = bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    return quantized_mm(a, b, accumulator, out_dtype, bias, layout=layout, fast_accum=fast_accum,
                        threads=torch.get_num_threads(), mkldnn=mkldnn, stacklevel=3)


def take_step(counter: torch.Tensor, owner: str) -> int:
    """The step a call runs (the ``fp8emu_step`` counter's value), the counter advanced by one.

    The counter seeds stochastic rounding and is saved in the state dict: a negative value (a corrupt or
    hand-edited checkpoint, or int64's wrap past its largest value) reached NumPy's bare "expected non-negative
    integer" at the first quantizer.  It is an int64: loaded with ``load_state_dict(..., assign=True)`` from a
    state dict that held another dtype, a uint8 counter wrapped from 255 to 0 (its stochastic rounding repeated
    the first steps' bits, silently) and a bool one was torch's bare "result type Long can't be cast to the
    desired output type Bool"."""
    with STATE_LOCK:     # the read and the increment as one (two threads read one step)
        return _take_step(counter, owner)


def _take_step(counter, owner):
    if counter.dtype != torch.int64:
        raise TypeError(f"{owner}: its step counter (the fp8emu_step buffer, saved in its state dict) is a "
                        f"{counter.dtype} tensor; it must be torch.int64 (it counts the calls and seeds stochastic "
                        "rounding): load a state dict an emulated layer saved, or without assign=True (which takes "
                        "the state dict's dtype)")
    step = int(counter)
    if not 0 <= step < torch.iinfo(torch.int64).max:
        raise ValueError(f"{owner}: its step counter (the fp8emu_step buffer, saved in its state dict) is {step}; it "
                         f"counts the calls from 0 to {torch.iinfo(torch.int64).max - 1} and seeds stochastic "
                         "rounding: load a state dict an emulated layer saved, or restart it with fp8emu_step.zero_()")
    with torch.no_grad():
        counter += 1
    return step


@contextlib.contextmanager
def buffers_as(module: torch.nn.Module, saved: dict, *, others_absent: bool = False):
    """Inside the block, ``module``'s buffers named in ``saved`` are copies of those tensors (with
    ``others_absent``, its other buffers are None, as before a first call made them); after it, the module holds
    its own tensors again, untouched whatever the block wrote.

    Activation checkpointing's recompute runs a call again with the state it first ran with (its step, which seeds
    stochastic rounding, delayed scaling's amax history and scale) and must leave the state as the forward left it:
    the recompute advanced the step and recorded the amax a second time, and quantized with the updated scale.

    Examples
    --------
    >>> m = torch.nn.Module()
    >>> m.register_buffer("step", torch.tensor(5))
    >>> with buffers_as(m, {"step": torch.tensor(2)}):
    ...     _ = m.step.add_(1)
    ...     int(m.step)
    3
    >>> int(m.step)
    5
    """
    own = dict(module._buffers)
    for n in own:
        if n not in saved and others_absent:
            module._buffers[n] = None
    for n, t in saved.items():
        module._buffers[n] = t.detach().clone()
    try:
        yield
    finally:
        module._buffers.clear()
        module._buffers.update(own)


@contextlib.contextmanager
def float32_state(module: torch.nn.Module):
    """Inside the block ``module._apply`` may convert its buffers; after it, delayed scaling's state (the
    ``amax_history_*`` and ``scale_*`` buffers that were float32) is float32 again, with the values it had, on the
    device the conversion chose.

    TE keeps its ``fp8_meta`` (amax history and scale) in float32 whatever dtype the model is cast to.  Converted,
    a bfloat16 history was NumPy's bare "Got unsupported ScalarType BFloat16" at the next call, and
    ``model.half().float()`` brought the state back rounded to float16 (an amax past 65504 as Inf), silently.

    Examples
    --------
    >>> m = torch.nn.Module()
    >>> m.register_buffer("scale_input", torch.tensor([1 / 3]))
    >>> before = m.scale_input.clone()
    >>> with float32_state(m):
    ...     _ = m._apply(lambda t: t.half())
    >>> m.scale_input.dtype, torch.equal(m.scale_input, before)
    (torch.float32, True)
    """
    kept = {n: b for n, b in module._buffers.items()
            if n.startswith(("amax_history_", "scale_")) and b is not None and b.dtype == torch.float32}
    yield
    for n, b in kept.items():
        now = module._buffers.get(n)
        if now is not None and now.dtype != torch.float32:
            module._buffers[n] = b.to(now.device)


def value_key(t: torch.Tensor) -> tuple:
    """A tensor by its values, for the caches a layer keys by what it computes with: (dtype, shape, a digest of
    its bytes).  Equal values in new tensors (checkpointing's recompute) give the same key; a write through
    ``.data``, which moves no version counter, gives another."""
    a = t.detach().contiguous().cpu()
    raw = a.view(torch.uint8) if a.dtype == torch.bfloat16 else a
    return (str(a.dtype), tuple(a.shape), hashlib.blake2b(raw.numpy().tobytes(), digest_size=16).digest())


def first_order_only(owner: str, grads: tuple) -> tuple:
    """The gradients an emulated backward returns, made to raise one error naming ``owner`` if they are
    differentiated again.

    The backward is NumPy, so its gradients have no graph: with ``create_graph=True`` (a gradient penalty, a
    Hessian-vector product) they came back as constants, and a penalty on them (``(loss + g.norm()).backward()``)
    added nothing to the weights' gradients, silently.  Under ``create_graph`` each is an alias whose own
    backward raises (torch's mechanism for ``once_differentiable``, here whatever the incoming gradient)."""
    if not torch.is_grad_enabled():
        return grads
    live = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
    err = torch._C._functions.DelayedError(
        f"{owner}: the emulated backward (NumPy) is differentiable once: its gradients have no graph, so a second "
        "derivative through it (create_graph=True: a gradient penalty, a Hessian-vector product) is not "
        "computed".encode(), len(live))
    aliased = err(*[grads[i].detach().requires_grad_(True) for i in live])
    aliased = aliased if isinstance(aliased, tuple) else (aliased,)
    out = list(grads)
    for i, t in zip(live, aliased):
        out[i] = t
    return tuple(out)


def operand_stats(arr: np.ndarray, op: Operand) -> dict:
    """Per-operand diagnostics: amax, a representative scale, fractions of the elements.

    ``scale``: the quantization multiplier (per-tensor recipes), NVFP4's global ``S_enc``,
    or the median of the block / row scales.  ``frac_saturated``: elements whose code sits at
    the format's largest magnitude; ``frac_underflow``: finite non-zero inputs whose code is
    zero; ``frac_flushed``: non-zero codes in the format's subnormal range;
    ``n_nonfinite``: NaN / Inf in the input.  For an operand quantized after a random Hadamard
    transform (NVFP4's wgrad copies) the codes are those of the transformed values; ``amax`` and
    ``n_nonfinite`` are of the input.
    """
    x = np.asarray(arr, np.float32)
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore"):
        amax = float(np.max(np.abs(x[finite]))) if finite.any() else float("nan")
    row = {"amax": amax, "n_nonfinite": int(x.size - finite.sum())}
    if op.kind == "hp":
        row.update(scale=1.0, frac_saturated=0.0, frac_underflow=0.0, frac_flushed=0.0)
        return row
    if op.kind == "fp8":
        fmt, codes = op.fmt, op.codes
        with np.errstate(divide="ignore"):
            row["scale"] = float(1.0 / _median_of_numbers(op.scale_inv))
    else:
        st = op.st
        fmt, codes = st.fmt, st.codes
        g = st.global_scale if st.global_scale is not None else None
        row["scale"] = float(np.median(g)) if g is not None else _median_of_numbers(st.scale)
    v = np.abs(decode(codes, fmt).astype(np.float64))
    n = max(x.size, 1)
    row["frac_saturated"] = float(np.sum(v == float(fmt.max)) / n)
    row["frac_underflow"] = float(np.sum((v == 0) & finite & (x != 0)) / n)
    row["frac_flushed"] = float(np.sum((v > 0) & (v < fmt.min_normal)) / n)
    return row


def _median_of_numbers(a) -> float:
    """The median of the non-NaN entries, NaN when there are none (np.nanmedian warns 'All-NaN slice')."""
    v = np.asarray(a, np.float64).reshape(-1)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else float("nan")
