"""What an emulated attention call returns: its output (:class:`AttentionResult`) and its diagnostics
(:class:`AttentionReport`: saturation, underflow, non-finite values, errors against float64)."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["AttentionResult", "AttentionReport"]


@dataclasses.dataclass
class AttentionReport:
    """Diagnostics of one emulated attention call.

    Attributes
    ----------
    recipe : str
    p_saturated, p_underflow, s_overflow : ndarray of int64, shape (H, Nq)
        Per head and query row: P elements (after the pre-scale) that a non-saturating
        cast would overflow (clipped to the max when saturating, NaN/Inf otherwise);
        P elements > 0 that the cast made zero; non-finite S elements.
    max_rel_error, rms_rel_error, cosine : ndarray of float64, shape (H,) or None
        O against exact float64 attention of the unquantized inputs (None when not
        computed): ``max|O - R| / max|R|``, ``||O - R|| / ||R||`` and the cosine of the
        flattened head outputs.
    lse_max_abs_error : ndarray (H,) or None
        Largest absolute error of the lse against float64.
    error_threshold : float
        RMS relative error above which :attr:`flags` reports the output error.
    reference : {"inputs", "dequantized"} or None
        What the errors were measured against (see :func:`attention`).
    kernel_rms_rel_error, kernel_max_rel_error : ndarray (H,) or None
        The same errors against float64 attention of the dequantized Q, K, V (the
        quantized values times their descales): the error of the kernel's arithmetic
        (softmax, P cast, accumulation) without the input quantization.
    out_nonfinite, lse_invalid : ndarray (H, Nq) or None
        Per query row: NaN/Inf elements of the output, and whether the lse is NaN, +Inf,
        or -Inf for a row that has keys to attend to (its probabilities all flushed to
        zero; filled by :func:`attention`).  A NaN or Inf anywhere in the output, the
        lse or the errors is always flagged: a result that was not checked is never ``ok``.
    """

    recipe: str
    p_saturated: np.ndarray
    p_underflow: np.ndarray
    s_overflow: np.ndarray
    max_rel_error: np.ndarray | None = None
    rms_rel_error: np.ndarray | None = None
    cosine: np.ndarray | None = None
    lse_max_abs_error: np.ndarray | None = None
    error_threshold: float = 0.1
    reference: str | None = None
    kernel_rms_rel_error: np.ndarray | None = None
    kernel_max_rel_error: np.ndarray | None = None
    out_nonfinite: np.ndarray | None = None
    lse_invalid: np.ndarray | None = None

    @property
    def flags(self) -> list:
        """Failure modes found, one sentence each (empty when none).

        Examples
        --------
        >>> z = np.zeros((1, 2), np.int64)
        >>> AttentionReport("x", z + 1, z, z).flags
        ['P saturation: 2 elements in 2 rows (the largest probabilities are clipped; the float32 row sum still counts them)']
        """
        out = []
        for name, counts, why in (
                ("P saturation", self.p_saturated,
                 "the largest probabilities are clipped; the float32 row sum still counts them"),
                ("P underflow", self.p_underflow,
                 "small probabilities flushed to zero; invisible to LSE-based checks"),
                ("S overflow", self.s_overflow, "non-finite scores")):
            n = int(counts.sum())
            if n:
                out.append(f"{name}: {n} elements in {int((counts > 0).sum())} rows ({why})")
        for name, counts, why in (("non-finite output", self.out_nonfinite, "NaN or Inf in O"),
                                  ("invalid lse", self.lse_invalid,
                                   "NaN or Inf log-sum-exp of a row with keys; its row sum is 0, NaN or Inf")):
            n = 0 if counts is None else int(np.sum(counts))
            if n:
                out.append(f"{name}: {n} elements in {int((np.asarray(counts) > 0).sum())} rows ({why})")
        errors = {e: getattr(self, e) for e in ("max_rel_error", "rms_rel_error", "lse_max_abs_error",
                                                 "kernel_max_rel_error", "kernel_rms_rel_error")}
        bad = [e for e, a in errors.items() if a is not None and not np.all(np.isfinite(a))]
        if bad:   # a NaN error is an unchecked result, never a pass (np.nanmax would skip it)
            out.append(f"error not finite: {', '.join(bad)} (NaN/Inf in the output or the reference)")
        rms = self.rms_rel_error
        if rms is not None and np.any(np.asarray(rms) > self.error_threshold):
            out.append(f"output error: RMS relative error {np.nanmax(rms):.3g} above "
                       f"{self.error_threshold}")
        return out

    @property
    def ok(self) -> bool:
        """True when :attr:`flags` is empty."""
        return not self.flags

    def __str__(self):
        lines = [f"attention report ({self.recipe})"]
        if self.rms_rel_error is not None:
            lines.append(f"  error vs float64: max rel {np.max(self.max_rel_error):.3e}, RMS rel "
                         f"{np.max(self.rms_rel_error):.3e}, cosine {np.min(self.cosine):.6f}")
        lines += [f"  {f}" for f in self.flags] or ["  no failure modes flagged"]
        return "\n".join(lines)


@dataclasses.dataclass
class AttentionResult:
    """Output of :func:`attention`: ``out`` (H, Nq, dv) float32, ``lse`` (H, Nq) float32 natural
    log-sum-exp of the scaled scores, ``report`` (:class:`AttentionReport`), ``descales``
    (q, k, v float32 arrays of shape (H,) / (H_kv,))."""

    out: np.ndarray
    lse: np.ndarray
    report: AttentionReport
    descales: tuple


def fill_errors(report, out, lse, ref, ref_lse):
    """Write the errors of ``out`` and ``lse`` against the reference ``ref`` and ``ref_lse`` into ``report``."""
    H = out.shape[0]
    o = out.astype(np.float64).reshape(H, -1)
    r = ref.reshape(H, -1)
    err = np.abs(o - r)
    rmax = np.abs(r).max(axis=1)
    rn = np.linalg.norm(r, axis=1)
    on = np.linalg.norm(o, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        report.max_rel_error = np.where(rmax > 0, err.max(axis=1) / rmax, err.max(axis=1))
        report.rms_rel_error = np.where(rn > 0, np.linalg.norm(o - r, axis=1) / rn, np.linalg.norm(o - r, axis=1))
        report.cosine = np.where((rn > 0) & (on > 0), (o * r).sum(1) / (rn * on), np.where(rn == on, 1.0, 0.0))
        fin = np.isfinite(ref_lse)
        dl = np.where(fin, np.abs(lse.astype(np.float64) - np.where(fin, ref_lse, 0)), 0.0)
        report.lse_max_abs_error = dl.max(axis=1)
