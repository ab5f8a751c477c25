"""FP8 training, done for real: a NumPy MLP with FP8-emulated linear layers vs float32.

Every linear layer quantizes its operands with the HYBRID recipe (E4M3
activations and weights in the forward pass, E5M2 gradients in the backward
pass), each tensor with its own delayed scaling (scale from an amax history,
:class:`fp8emu.scaling.DelayedScaling`).  The FP8 GEMMs run on the codes with
:func:`fp8emu.gemm.scaled_mm`: a sequential float32 sum in K order
(``accumulator="fp32"``) or the emulation of Hopper's limited-precision
accumulator (``"hopper"``, slow).  Master weights, optimizer and loss stay in
float32, as in real FP8 training.

Reproducible anywhere: no result depends on the BLAS library or the CPU.  The
float32 GEMMs are sequential float32 sums in K order (one IEEE operation at a
time, the order fixed), not BLAS ``sgemm`` calls, whose summation order varies
between libraries, thread counts and CPUs; the softmax is computed in float64
and rounded to float32.

The task is synthetic (each class a mixture of Gaussian clusters) or, if scikit-learn is installed, its bundled 8x8 digits.

Examples
--------
>>> data = make_task(n_train=256, n_test=128, seed=0)
>>> data["x_train"].shape, int(data["y_train"].max()) < data["classes"]
((256, 32), True)
"""

from __future__ import annotations

import sys
import time
import types

import warnings

import numpy as np

from ..gemm import scaled_mm
from ..gemm.kernels import fp32_dot
from ..scaling import HYBRID, DelayedScaling, quantize_tensorwise
from .analysis import overflow_mask


def _scaled_mm(*args, **kw):
    """:func:`fp8emu.gemm.scaled_mm`, quiet about K not being a multiple of 16.

    The 10-class output layer has K = 10 in its input-gradient GEMM; cuBLASLt would pad it, and the
    emulation computes it exactly as asked, so the warning says nothing new here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not a multiple of 16.*")
        return scaled_mm(*args, **kw)


__all__ = ["make_task", "MLP", "sgd_momentum_step", "train", "compare", "summary"]


def make_task(n_train=8192, n_test=2048, *, dim=32, classes=10, seed=0, dataset="synthetic") -> dict:
    """A classification task: synthetic teacher-labelled Gaussians, or scikit-learn digits.

    Parameters
    ----------
    n_train, n_test : int
        Example counts (``synthetic`` only; ``digits`` uses a fixed 80/20 split of its 1797 images).
    dim, classes : int
        Input dimension and number of classes of the synthetic task.
    seed : int
        Seed of the data.
    dataset : {"synthetic", "digits"}
        ``digits`` needs scikit-learn (an optional extra, not a dependency).

    Returns
    -------
    dict
        ``x_train, y_train, x_test, y_test`` (float32 inputs, int labels) and ``classes``.
    """
    g = np.random.default_rng(seed)
    if dataset == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise ValueError("dataset 'digits' needs scikit-learn (pip install scikit-learn)") from None
        d = load_digits()
        x = (d.data / 16.0 - 0.5).astype(np.float32)
        perm = g.permutation(len(x))
        cut = int(0.8 * len(x))
        tr, te = perm[:cut], perm[cut:]
        return {"x_train": x[tr], "y_train": d.target[tr], "x_test": x[te], "y_test": d.target[te],
                "classes": 10}
    if dataset != "synthetic":
        raise ValueError(f"unknown dataset {dataset!r}; accepted: synthetic, digits")
    # Each class is a mixture of 3 Gaussian clusters (not linearly separable); a few features
    # have large variance so that per-tensor scaling has something to do.
    centers = g.standard_normal((classes * 3, dim)) * 1.2
    feat_scale = np.exp(g.uniform(-1.5, 1.5, dim))
    k = g.integers(0, classes * 3, n_train + n_test)
    x = (centers[k] + g.standard_normal((n_train + n_test, dim))) * feat_scale
    y = k % classes
    x = x.astype(np.float32)
    return {"x_train": x[:n_train], "y_train": y[:n_train], "x_test": x[n_train:], "y_test": y[n_train:],
            "classes": classes}


class _Quantizer:
    """Delayed scaling for one tensor role, counting overflows and underflows."""

    def __init__(self, fmt, history):
        self.fmt = fmt
        self.ds = DelayedScaling(fmt, amax_history_len=history)
        self.overflow = 0
        self.underflow = 0
        self.count = 0

    def __call__(self, x, update=True):
        """(dequantized x as float32, ScaledTensor); ``update=False`` (evaluation) leaves no trace."""
        scale = float(np.asarray(self.ds.scale).reshape(-1)[0])
        if not update:
            st = quantize_tensorwise(x, self.fmt, scale=scale)
            return np.asarray(st.dequantize(np.float32), np.float32), st
        st = self.ds.quantize(x)
        q = np.asarray(st.dequantize(np.float32), np.float32)
        # fl32(x * scale) as the recipe computes it, against the threshold of its RNE cast
        y = np.multiply(np.asarray(x, np.float32), np.float32(scale), dtype=np.float32)
        self.overflow += int(np.count_nonzero(overflow_mask(y, self.fmt)))
        self.underflow += int(np.count_nonzero((q == 0) & (x != 0)))
        self.count += x.size
        return q, st


class MLP:
    """A ReLU MLP whose linear layers run in float32 or emulated FP8.

    Parameters
    ----------
    sizes : sequence of int
        Layer widths, input first, classes last.
    precision : {"float32", "fp8"}
        ``fp8``: HYBRID recipe with delayed scaling on every GEMM operand.
    accumulator : {"fp32", "hopper"}
        How the FP8 GEMMs accumulate in :func:`fp8emu.gemm.scaled_mm` (``hopper`` is slow).
        float32 GEMMs are always sequential float32 sums in K order.
    amax_history_len : int
        Length of each tensor's amax history.
    seed : int
        Initialization seed (the same seed gives the same initial weights in both precisions).
    """

    def __init__(self, sizes, *, precision="float32", accumulator="fp32", amax_history_len=16, seed=0):
        if precision not in ("float32", "fp8"):
            raise ValueError(f"precision must be 'float32' or 'fp8', got {precision!r}")
        if accumulator not in ("fp32", "hopper"):
            raise ValueError(f"accumulator must be 'fp32' or 'hopper', got {accumulator!r}")
        g = np.random.default_rng(seed)
        self.W = [(g.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
                  for a, b in zip(sizes[:-1], sizes[1:])]
        self.b = [np.zeros(b, np.float32) for b in sizes[1:]]
        self.precision = precision
        self.accumulator = accumulator
        if precision == "fp8":
            fwd, bwd = HYBRID["forward"], HYBRID["backward"]
            self.q = [{"x": _Quantizer(fwd, amax_history_len), "w": _Quantizer(fwd, amax_history_len),
                       "g": _Quantizer(bwd, amax_history_len)} for _ in self.W]

    def _mm(self, a, sa, b, sb):
        """The product of a and b: float32 values, or FP8 codes with per-tensor scales (``sa``/``sb`` ScaledTensors).

        Neither depends on BLAS: float32 is summed in K order, FP8 by scaled_mm's accumulators.
        """
        if sa is None:
            return fp32_dot(a, b)
        return np.asarray(_scaled_mm(np.ascontiguousarray(sa.codes), np.ascontiguousarray(sb.codes),
                                     a_format=sa.fmt, b_format=sb.fmt,
                                     scale_a=float(np.ravel(sa.scale_inv)[0]),
                                     scale_b=float(np.ravel(sb.scale_inv)[0]),
                                     accumulator=self.accumulator), np.float32)

    def forward(self, x, train=True):
        """Logits and the cache needed by :meth:`backward` (``train=False``: no scaling updates)."""
        cache = []
        h = x
        for i, (W, b) in enumerate(zip(self.W, self.b)):
            if self.precision == "fp8":
                hq, hs = self.q[i]["x"](h, train)
                wq, ws = self.q[i]["w"](W, train)
            else:
                hq, hs, wq, ws = h, None, W, None
            z = self._mm(hq, hs, wq, ws) + b
            cache.append((hq, hs, wq, ws, z))
            h = np.maximum(z, 0) if i < len(self.W) - 1 else z
        return h, cache

    def backward(self, dlogits, cache):
        """Gradients (dW, db) per layer from the gradient of the loss w.r.t. the logits."""
        grads = [None] * len(self.W)
        g = dlogits
        for i in reversed(range(len(self.W))):
            hq, hs, wq, ws, z = cache[i]
            if i < len(self.W) - 1:
                g = g * (z > 0)
            if self.precision == "fp8":
                gq, gs = self.q[i]["g"](g)
            else:
                gq, gs = g, None
            # Transposed operands are views of the same codes and scales.
            dW = self._mm(hq.T, _transposed(hs), gq, gs)
            dh = self._mm(gq, gs, wq.T, _transposed(ws))
            grads[i] = (dW, g.sum(0))
            g = dh
        return grads

    def counts(self) -> dict:
        """Total overflow / underflow / element counts over all quantized tensors, by role."""
        out = {}
        for role in ("x", "w", "g"):
            for k in ("overflow", "underflow", "count"):
                out[f"{role}_{k}"] = sum(getattr(q[role], k) for q in getattr(self, "q", []))
        return out


def _transposed(st):
    """The codes-and-scales view of a per-tensor ScaledTensor's transpose (None stays None)."""
    if st is None:
        return None
    return types.SimpleNamespace(codes=st.codes.T, fmt=st.fmt, scale_inv=st.scale_inv)


def _softmax_xent(logits, y):
    # float64, rounded to float32 once at the end: NumPy's float32 exp/log differ between
    # CPUs (SIMD kernels), a float64 difference of an ulp almost never survives the rounding
    z = logits.astype(np.float64) - logits.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    loss = float(-np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)))
    d = p
    d[np.arange(len(y)), y] -= 1
    return loss, (d / len(y)).astype(np.float32)


class _Progress:
    def __init__(self, total, label, enabled):
        self.total, self.label, self.enabled, self.t0 = total, label, enabled, time.time()

    def __call__(self, i, loss):
        if self.enabled and (i % max(1, self.total // 50) == 0 or i == self.total):
            done = int(30 * i / self.total)
            print(f"\r{self.label:>8} [{'#' * done}{'.' * (30 - done)}] {i}/{self.total} "
                  f"loss {loss:.4f} {time.time() - self.t0:.1f}s", end="" if i < self.total else "\n",
                  file=sys.stderr, flush=True)


def sgd_momentum_step(model, grads, vel, lr, momentum):
    """One SGD step with momentum, in place: ``v = momentum * v + g``, ``w -= lr * v`` per layer.

    ``grads`` and ``vel`` are lists of ``(dW, db)`` / ``(vW, vb)`` pairs, one per layer of ``model``.
    """
    for i, (dW, db) in enumerate(grads):
        vW, vb = vel[i]
        vW *= momentum
        vW += dW
        vb *= momentum
        vb += db
        model.W[i] -= lr * vW
        model.b[i] -= lr * vb


def train(data, *, precision="float32", steps=400, batch=128, hidden=(128, 128), lr=0.05,
          momentum=0.9, accumulator="fp32", amax_history_len=16, seed=0, eval_every=None,
          progress=False) -> dict:
    """Train the MLP with SGD + momentum and return its curves and counts.

    Returns
    -------
    dict
        ``loss`` (per step), ``final_loss`` (mean of the last 10 % of steps), ``accuracy`` (held-out,
        at the end), ``test_accuracy`` ((steps, accuracies)), ``seconds`` and, for ``fp8``, the
        overflow/underflow counts of :meth:`MLP.counts`.

    Examples
    --------
    >>> r = train(make_task(512, 256), steps=20, batch=64)
    >>> len(r["loss"]), bool(r["loss"][-1] < r["loss"][0])
    (20, True)
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    x, y = data["x_train"], data["y_train"]
    sizes = [x.shape[1], *hidden, data["classes"]]
    model = MLP(sizes, precision=precision, accumulator=accumulator, amax_history_len=amax_history_len,
                seed=seed)
    vel = [(np.zeros_like(W), np.zeros_like(b)) for W, b in zip(model.W, model.b)]
    g = np.random.default_rng([seed, 1])
    eval_every = eval_every or max(1, steps // 10)
    losses, ev_steps, ev_acc = [], [], []
    bar = _Progress(steps, precision, progress)

    def accuracy():
        logits, _ = model.forward(data["x_test"], train=False)
        return float(np.mean(np.argmax(logits, 1) == data["y_test"]))

    t0 = time.time()
    for step in range(1, steps + 1):
        idx = g.integers(0, len(x), batch)
        logits, cache = model.forward(x[idx])
        loss, d = _softmax_xent(logits, y[idx])
        sgd_momentum_step(model, model.backward(d, cache), vel, lr, momentum)
        losses.append(loss)
        if step % eval_every == 0 or step == steps:
            ev_steps.append(step)
            ev_acc.append(accuracy())
        bar(step, loss)
    tail = max(1, steps // 10)
    out = {"loss": np.asarray(losses), "final_loss": float(np.mean(losses[-tail:])),
           "accuracy": ev_acc[-1], "test_accuracy": (np.asarray(ev_steps), np.asarray(ev_acc)),
           "seconds": time.time() - t0}
    if precision == "fp8":
        out.update(model.counts())
    return out


def compare(*, steps=400, dataset="synthetic", accumulator="fp32", seed=0, progress=False, n_train=8192,
            n_test=2048, **kw) -> dict:
    """Train the same model from the same initialization in float32 and in FP8; both results.

    ``n_train``/``n_test`` size the synthetic task; other keywords go to :func:`train`.

    Returns
    -------
    dict
        ``{"float32": train(...), "fp8": train(...)}``.
    """
    data = make_task(n_train, n_test, seed=seed, dataset=dataset)
    return {p: train(data, precision=p, steps=steps, accumulator=accumulator, seed=seed,
                     progress=progress, **kw) for p in ("float32", "fp8")}


def summary(results) -> str:
    """A plain-text table of :func:`compare`'s results."""
    lines = ["precision  final_loss  accuracy  seconds  overflow(x/w/g)  underflow(x/w/g)  elements(x/w/g)"]
    for name, r in results.items():
        if name == "fp8":
            ov = "/".join(str(r[f"{k}_overflow"]) for k in "xwg")
            un = "/".join(str(r[f"{k}_underflow"]) for k in "xwg")
            n = "/".join(str(r[f"{k}_count"]) for k in "xwg")
        else:
            ov = un = n = "-"
        lines.append(f"{name:<9}  {r['final_loss']:.4f}      {r['accuracy']:.4f}    {r['seconds']:.1f}    "
                     f"{ov}  {un}  {n}")
    return "\n".join(lines)
