"""torch's own CPU ``_scaled_mm``, both of its paths, as ``scaled_mm`` accumulator presets.

``torch._scaled_mm`` on the CPU (``aten/src/ATen/native/Blas.cpp``, ``_scaled_mm_out_cpu``) takes
one of two paths:

``"torch-cpu-onednn"``
    Runs when mkldnn is enabled (``torch.backends.mkldnn``), both scales are tensor-wise (one
    element), and the operands share one FP8 dtype on a CPU with AMX-INT8 (mixed dtypes need
    AMX-FP16; without AMX-INT8 every call takes the emulated path).  oneDNN scales every product before it is summed, in K order, in float32 without
    FMA: ``acc = fl(acc + fl(fl(a_k * b_k * sa) * sb))`` (the product ``a_k * b_k`` is exact).  A bias is
    added in float32 (``fl(acc + bias)``), ``scale_result`` divides (``fl(d / scale_result)``),
    and an FP8 output is converted float32 -> float16 -> FP8 without saturating (480 becomes NaN
    in E4M3FN; 30.998046875 becomes 32 by double rounding).
``"torch-cpu-emulated"``
    Every other case (row-wise scales, mixed FP8 dtypes without AMX-FP16, mkldnn off):
    ``_scaled_mm_out_cpu_emulated`` pre-scales the operands, ``X = fl(a * sa)``, ``Y = fl(b * sb)``
    (row-wise: per row of A / column of B), multiplies them with MKL's ``sgemm``, adds the bias
    in float32, multiplies an FP8 output by ``fl(1 / scale_result)`` and casts with torch's own
    CPU cast (E4M3FN saturates overflow and Inf to 448; E5M2 overflows to Inf).

The sgemm's summation order is the BLAS's, and a BLAS chooses it by CPU, library version, MKL
settings, thread count, shape and operand layout, so :func:`sgemm` takes it from
:mod:`fp8emu.gemm.cpu_order`: **revealed on the running machine** wherever torch is importable (torch's
own ``mm`` probed once per shape, :mod:`fp8emu.gemm.order_probe`, cached), else a **recorded model** of
this CPU family (:data:`~fp8emu.gemm.cpu_order.RECORDED`: an AMD EPYC's ``"mkl-2024.2-amd-avx2"``, MKL's
``MKL_CBWR=COMPATIBLE`` branch, and the one described here).  ``"mkl-2024.2-avx512"`` (torch 2.13.0+cpu,
MKL 2024.2, an AVX-512 + AMX Intel Xeon):
K is cut into blocks, each summed by one float32 FMA chain per output in K order
(``c = fl(c + x_k y_k)``), and the block sums are added in order.  Where M or N is below 192 (MKL's
small-matrix driver) the blocks are 384 while more than 768 remain, then the rest in one block (at
most 384) or two halves (``ceil`` first): ``K <= 384`` is one chain, ``K = 500`` two of 250,
``K = 1024`` blocks of 384, 320, 320.  Where both reach 192 (the packing driver) blocks beyond 768 are
plain: ``K = 1024`` is 384, 384, 256, and ``K = 769`` is 384, 384 and a block of one product, which MKL
rounds and then adds (:class:`~fp8emu.gemm.sumtree.SumTree`'s ``lone``).  On two threads MKL gives each thread half of a K above 768
once the product passes about 192,000 multiply-adds, each half blocked as the packing driver does,
and adds the halves.  Its proven range: ``M >= 2`` and ``N >= 2`` (a single row or column goes to
MKL's gemv); ``K <= 4096`` on one thread, and on two for M, N <= 128 (larger shapes, where MKL
decides between splitting K and splitting rows by a rule not measured, warn above ``K = 768``).  On another CPU, under
``MKL_ENABLE_INSTRUCTIONS`` / ``MKL_CBWR``, or outside that range it warns.  Revealed orders are exact
wherever the BLAS sums in a fixed binary tree of float32 additions or FMAs, some leaves rounded and then
added (every GEMM with M, N >= 2 on MKL's AVX-512, AVX2 and CBWR=COMPATIBLE kernels, 1 and 2 threads, checked
live; elsewhere a RuntimeWarning says how many outputs the order found explains); MKL's gemv
(M or N = 1) is not such a tree on these kernels, and a RuntimeWarning says how many outputs the
order found explains (or, where it explains every product of the probe, that torch may differ on others).  NaN results are NaN, but their sign bit (which operand's NaN an instruction
passes on, or x86's negative default NaN) is not reproduced, on either path.  The oneDNN path's
order is the same for every shape, K (checked up to 4096) and thread count (1, 2).

``"torchao-emulate"`` (:func:`torchao_emulated_mm`, not a ``scaled_mm`` accumulator: it takes torchao's
scales, which it divides by) is torchao ``Float8Linear(emulate=True)``'s GEMM, which never calls
``_scaled_mm``: ``torch.mm(fl(a / sa), fl(b / sb))``, the same sgemm, then the output dtype and the bias
(``tests/test_torchao_float8linear.py``, live torchao 0.18.0 and recorded vectors).

``use_fast_accum`` changes nothing on the CPU (0 of 104,448 outputs over both paths, K up to 4096,
float32 / bfloat16 / E4M3 outputs, torch 2.13.0+cpu), so both settings map to the same preset.  Evidence: ``tests/test_torch_cpu_scaled_mm.py`` (vectors recorded from torch
by ``tools/record_torch_cpu_scaled_mm.py`` into ``tests/data/torch_cpu/``, and live torch).

Examples
--------
>>> import numpy as np
>>> from fp8emu.formats import get_format
>>> e4 = get_format("e4m3fn")
>>> a = np.zeros((2, 16), np.uint8); a[:, :2] = [0x4B, 0x44]          # 5.5, 3
>>> b = np.zeros((16, 2), np.uint8); b[:2, :] = [[0x40], [0x38]]      # 2, 1
>>> sa, sb = np.float32(1.3712345), np.float32(0.0912345)
>>> float(torch_cpu_mm("torch-cpu-onednn", a, e4, b, e4, sa, None, sb, None)[0, 0])
1.7514545917510986
"""

from __future__ import annotations

import warnings

import numpy as np

from ..codec import decode, encode
from .cpu_order import LAYOUTS, RECORDED, cpu_flags, order_for
from .epilogue import bias_in
from .sumtree import SumTree, evaluate, evaluate_order, may_reach_subnormals

__all__ = ["TORCH_CPU_PATHS", "cpu_path", "torch_cpu_mm", "torch_cpu_epilogue", "fast_accum_accumulator",
           "sgemm", "torchao_emulated_mm", "TORCHAO_EMULATE",
           "sgemm_k_blocks", "EMULATED_MAX_K"]

#: The two CPU paths and what selects each (see the module docstring).
TORCH_CPU_PATHS = {
    "torch-cpu-onednn": "torch._scaled_mm on the CPU through oneDNN (mkldnn on, tensor-wise scales, one FP8 "
                        "dtype, AMX-INT8 CPU): per-product scaling in K order, float32 without FMA; FP8 "
                        "output via float16, not saturating. Bit-exact on any shape, K <= 4096, 1-2 threads "
                        "(torch 2.13.0+cpu)",
    "torch-cpu-emulated": "torch._scaled_mm on the CPU through _scaled_mm_out_cpu_emulated (row-wise scales, "
                          "mixed FP8 dtypes, or mkldnn off): pre-scaled float32 operands, MKL sgemm in the "
                          "order of this CPU (revealed with torch; recorded: on an AVX-512 Xeon FMA chains "
                          "over K blocks of 384, the last two halved below 192 rows or columns; on an AVX2 "
                          "EPYC blocks of 192), x fl(1/scale_result), torch's CPU cast. Bit-exact for M, N >= 2 "
                          "and K <= 4096 on 1 thread, and on 2 threads where the order's model is proven "
                          "(torch 2.13.0+cpu, MKL 2024.2)",
}
#: Largest K the recorded MKL sgemm model was proven for (1 thread; 2 threads for M, N <= 128 or K <= 768).
EMULATED_MAX_K = RECORDED["mkl-2024.2-avx512"].max_k
#: Rows of the (rows, K, N) product block the oneDNN path forms at once.
_ROW_ELEMS = 1 << 22


def cpu_path(a_format, b_format, *, tensorwise, mkldnn=True, flags=None) -> str:
    """Which preset describes torch's CPU ``_scaled_mm`` for these operands on this CPU.

    torch takes oneDNN when mkldnn is on, both scales are tensor-wise and the CPU has AMX-INT8
    (operands of two FP8 dtypes also need AMX-FP16); every other call is the emulated path
    (``aten/src/ATen/native/Blas.cpp``).  The mixed-dtype oneDNN case (AMX-FP16 CPUs) was not
    recorded here.

    Parameters
    ----------
    a_format, b_format : str
        The operands' FP8 formats (``"e4m3fn"``, ``"e5m2"``).
    tensorwise : bool, keyword-only
        Both scales are single elements.
    mkldnn : bool, keyword-only
        ``torch.backends.mkldnn.enabled`` (and available).
    flags : iterable of str, optional, keyword-only
        CPU flags; default: this machine's (:func:`fp8emu.gemm.cpu_order.cpu_flags`).

    Examples
    --------
    >>> cpu_path("e4m3fn", "e4m3fn", tensorwise=True, flags={"amx_int8"})
    'torch-cpu-onednn'
    >>> cpu_path("e4m3fn", "e5m2", tensorwise=True, flags={"amx_int8"})
    'torch-cpu-emulated'
    >>> cpu_path("e4m3fn", "e4m3fn", tensorwise=False, flags={"amx_int8"})
    'torch-cpu-emulated'
    """
    for name, v in (("tensorwise", tensorwise), ("mkldnn", mkldnn)):
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {v!r}")
    # one string of flags was read as its characters (an AMX CPU said to take the emulated path)
    if isinstance(flags, (str, bytes)):
        raise TypeError(f"flags must be an iterable of CPU flag names (e.g. {{'amx_int8'}}), not one string: "
                        f"got {flags!r:.60}")
    names = [getattr(f, "name", f) for f in (a_format, b_format)]
    if not all(isinstance(n, str) and n in ("e4m3fn", "e5m2") for n in names):
        raise ValueError(f"torch's CPU _scaled_mm takes float8_e4m3fn / float8_e5m2 operands (formats 'e4m3fn', "
                         f"'e5m2'), got {a_format!r} and {b_format!r}")
    have = cpu_flags() if flags is None else frozenset(flags)
    same = names[0] == names[1]
    if mkldnn and tensorwise and "amx_int8" in have and (same or "amx_fp16" in have):
        return "torch-cpu-onednn"
    return "torch-cpu-emulated"


def fast_accum_accumulator(use_fast_accum, accumulator):
    """The accumulator ``use_fast_accum`` maps to: ``True`` -> ``"hopper-fast"``, ``False`` -> ``"hopper"``.

    torch's ``use_fast_accum`` selects cuBLASLt's fast accumulation on Hopper; on the CPU it
    changes nothing, so with a ``torch-cpu-*`` accumulator both settings are accepted.  An
    explicit accumulator that contradicts the flag is an error.

    Examples
    --------
    >>> fast_accum_accumulator(True, None), fast_accum_accumulator(False, "hopper")
    ('hopper-fast', 'hopper')
    >>> fast_accum_accumulator(True, "torch-cpu-onednn")
    'torch-cpu-onednn'
    """
    if use_fast_accum is None:
        return accumulator
    if not isinstance(use_fast_accum, (bool, np.bool_)):
        raise TypeError(f"use_fast_accum must be True or False, got {use_fast_accum!r}")
    want = "hopper-fast" if use_fast_accum else "hopper"
    if accumulator is None:
        return want
    if isinstance(accumulator, str) and accumulator in TORCH_CPU_PATHS:
        return accumulator          # the CPU ignores the flag
    name = accumulator if isinstance(accumulator, str) else getattr(accumulator, "name", None)
    if name != want:
        raise ValueError(f"use_fast_accum={bool(use_fast_accum)} means accumulator={want!r}, but "
                         f"accumulator={name or accumulator!r} was given; pass one of them (or a "
                         f"torch-cpu-* accumulator, which both settings leave unchanged)")
    return accumulator


def _f32_values(codes, fmt):
    return decode(codes, fmt, dtype=np.float32)


def _onednn_sum(va, vb, sa, sb):
    """``Σ_k fl(fl(a_k b_k · sa) · sb)`` added in K order in float32 (no FMA)."""
    M, K = va.shape
    N = vb.shape[1]
    out = np.zeros((M, N), np.float32)
    if K == 0:
        return out
    rows = max(1, _ROW_ELEMS // max(1, K * N))
    with np.errstate(all="ignore"):
        for m0 in range(0, M, rows):
            p = va[m0:m0 + rows, :, None] * vb[None, :, :]          # exact in float32
            t = (p * sa) * sb                                          # two float32 roundings
            # np.add.accumulate adds strictly in order (np.sum would pair them up)
            out[m0:m0 + rows] = np.add.accumulate(t, axis=1, dtype=np.float32)[:, -1, :]
    return out


def _fma_chain(x, y, k0, k1):
    """One float32 FMA chain per output over K in ``[k0, k1)``, from +0: ``c = fl(c + x_k y_k)``."""
    return evaluate(SumTree.blocks([0, k1 - k0]), x[:, k0:k1], y[k0:k1])


def _emulated_sum(va, vb, sa_rows, sb_cols, layout):
    """torch's ``mm`` of the pre-scaled float32 operands (:func:`sgemm`)."""
    with np.errstate(all="ignore"):
        x = (va * sa_rows).astype(np.float32)
        y = (vb * sb_cols).astype(np.float32)
    return sgemm(x, y, layout=layout, name="torch-cpu-emulated", stacklevel=6)


def sgemm(x, y, *, threads=None, layout="NN", name="sgemm", stacklevel=2):
    """``torch.mm`` of two float32 matrices on the CPU, summed in the order torch's BLAS takes here.

    The order comes from :func:`fp8emu.gemm.cpu_order.order_for`: revealed on this machine where
    torch is importable (bit for bit on any CPU), else a recorded model (MKL 2024.2's AVX-512
    sgemm: one FMA chain per K block of :func:`sgemm_k_blocks`, the block sums added in order),
    which warns outside the CPU and shapes it was proven on.
    ``threads``: torch's thread count where the caller knows it (``torch.get_num_threads()``).
    ``layout``: how A and B reach ``mm`` (``"NN"``, ``"NT"``, ``"TN"``, ``"TT"``: row-major or
    transposed views), which can change MKL's order.
    Sums are IEEE float32 arithmetic: where the calling thread flushes subnormals to zero
    (``torch.set_flush_denormal(True)``) and these operands can reach them, a RuntimeWarning says torch may differ.

    Examples
    --------
    >>> from fp8emu.gemm import cpu_order
    >>> x = np.array([[1.0, 2.0**-24], [3.0, 0.5]], np.float32)
    >>> with cpu_order.use("mkl-2024.2-avx512"):
    ...     sgemm(x, np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)).tolist()
    [[1.0, 5.960464477539063e-08], [3.5, 0.5]]
    """
    x, y = _f32_operand(x, "x"), _f32_operand(y, "y")
    M, K = x.shape
    N = y.shape[1]
    if y.shape[0] != K:
        raise ValueError(f"{name}: x is {M}x{K} and y is {y.shape[0]}x{N}: their inner dimensions must match")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                or threads < 1):
        raise ValueError(f"{name}: threads must be a positive integer (torch's thread count) or None, got {threads!r}")
    if not isinstance(layout, str) or layout not in LAYOUTS:   # checked for an empty product too
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if K == 0 or M == 0 or N == 0:
        return np.zeros((M, N), np.float32)          # torch.mm's empty sum is +0
    order, _ = order_for(M, K, N, threads=threads, layout=layout, name=name, stacklevel=stacklevel + 1)
    if _flushes_subnormals() and may_reach_subnormals(x, y):
        # torch.set_flush_denormal(True) sets FTZ / DAZ on the thread: torch.mm gave 0 where the IEEE sum (this one) is
        # subnormal (32 of 64 outputs of an 8x64x8 product on an AMD EPYC), silently
        warnings.warn(f"{name}: this thread flushes subnormal floats to zero (torch.set_flush_denormal(True), or "
                      "FTZ / DAZ set by another library), and so does torch.mm; fp8emu sums in IEEE arithmetic, so "
                      "outputs whose operands, products or partial sums are subnormal may differ from torch's",
                      RuntimeWarning, stacklevel=stacklevel)
    with np.errstate(all="ignore"):
        return evaluate_order(order, x, y)


def _flushes_subnormals():
    """Whether this thread's float arithmetic flushes subnormals (FTZ: a subnormal result is 0; DAZ: a subnormal
    operand is 0), as ``torch.set_flush_denormal(True)`` sets it; NumPy computes on the same thread's settings."""
    least, sub = np.array([2.0 ** -126, 2.0 ** -140], np.float32)        # float32's least normal, a subnormal
    with np.errstate(all="ignore"):
        return bool(least * np.float32(0.5) == 0 or sub + np.float32(0) == 0)


def _f32_operand(a, what):
    """A 2-D float32 operand; float16 / bfloat16 are exact in float32, anything else is refused."""
    try:
        a = np.asarray(a)
    except TypeError as exc:
        # a torch bfloat16 tensor has no NumPy dtype: torch's bare "Got unsupported ScalarType BFloat16"
        raise TypeError(f"sgemm: {what} cannot be read as a NumPy array ({exc}); give a float32, float16 or "
                        "bfloat16 NumPy array (a torch bfloat16 tensor: tensor.float())") from None
    if a.ndim != 2:
        raise ValueError(f"sgemm: {what} must be a 2-D matrix, got {a.ndim} dimension(s) {a.shape}")
    if a.dtype.name not in ("float32", "float16", "bfloat16"):
        raise TypeError(f"sgemm: {what} must be float32 (float16 and bfloat16 are taken exactly), got {a.dtype}: "
                        "torch.mm's sgemm multiplies float32 matrices")
    return a.astype(np.float32, copy=False)


def sgemm_k_blocks(K, M=2, N=2):
    """Bounds of the K blocks MKL 2024.2's AVX-512 sgemm sums separately on one thread, as measured.

    M and N decide the driver: the last two blocks are halved unless both reach 192.

    Examples
    --------
    >>> sgemm_k_blocks(300), sgemm_k_blocks(500), sgemm_k_blocks(1024)
    ([0, 300], [0, 250, 500], [0, 384, 704, 1024])
    >>> sgemm_k_blocks(1024, 256, 256)
    [0, 384, 768, 1024]
    """
    return RECORDED["mkl-2024.2-avx512"].blocks(K, M, N)


def torch_cpu_epilogue(path, v, bias, odt, ofmt, scale_result):
    """Bias, ``scale_result`` and the output conversion of one CPU path (``v``: float32 sums)."""
    with np.errstate(all="ignore"):
        if bias is not None:
            v = (v + bias_in(bias.reshape(1, -1), np.float32)).astype(np.float32)
        if ofmt is None:
            return v.astype(odt)
        if scale_result is not None:
            sr = np.float32(scale_result)
            v = (v / sr if path == "torch-cpu-onednn" else v * (np.float32(1) / sr)).astype(np.float32)
    if path == "torch-cpu-onednn":
        with np.errstate(over="ignore"):              # beyond 65520 the float16 step gives Inf, as oneDNN's
            half = v.astype(np.float16)
        return encode(half, ofmt, saturate=False)
    return encode(v, ofmt, profile="torch-cpu")


def torch_cpu_mm(path, ca, fa, cb, fb, sa, sa_row, sb, sb_col, bias=None, odt=np.dtype(np.float32), ofmt=None,
                 scale_result=None, layout="NN"):
    """``torch._scaled_mm`` on the CPU by ``path`` (a key of :data:`TORCH_CPU_PATHS`).

    ``sa`` / ``sb``: float32 scalars, or ``None`` with ``sa_row`` (M, 1) / ``sb_col`` (1, N) float32
    row-wise scales (emulated path only).  ``bias``: (N,) values, added in float32.  ``layout``: how
    the emulated path's ``mm`` sees its pre-scaled operands (row-major, whatever the codes' strides:
    checked against live torch 2.13 with column-major B).
    """
    if path not in TORCH_CPU_PATHS:
        raise ValueError(f"unknown torch CPU path {path!r}; use one of {sorted(TORCH_CPU_PATHS)}")
    for f in (fa, fb):
        if f.name not in ("e4m3fn", "e5m2"):
            raise ValueError(f"{path}: torch's CPU _scaled_mm takes float8_e4m3fn / float8_e5m2 operands, "
                             f"got {f.name}")
    if ofmt is not None and ofmt.name not in ("e4m3fn", "e5m2"):
        raise ValueError(f"{path}: torch's CPU _scaled_mm writes float32, bfloat16, float16, float8_e4m3fn "
                         f"or float8_e5m2, not {ofmt.name}")
    va, vb = _f32_values(ca, fa), _f32_values(cb, fb)
    if path == "torch-cpu-onednn":
        if sa is None or sb is None:
            raise ValueError("torch-cpu-onednn takes tensor-wise (scalar) scales only: torch sends row-wise "
                             "scales to its emulated path; use accumulator='torch-cpu-emulated'")
        if fa != fb:
            raise ValueError(f"torch-cpu-onednn is reproduced for one FP8 dtype ({fa.name} x {fb.name} "
                             "given): on a CPU without AMX-FP16 torch sends mixed dtypes to its emulated "
                             "path; use accumulator='torch-cpu-emulated'")
        v = _onednn_sum(va, vb, np.float32(sa), np.float32(sb))
    else:
        rows = np.float32(sa) if sa is not None else sa_row.reshape(-1, 1).astype(np.float32)
        cols = np.float32(sb) if sb is not None else sb_col.reshape(1, -1).astype(np.float32)
        v = _emulated_sum(va, vb, rows, cols, layout)
    return torch_cpu_epilogue(path, v, bias, odt, ofmt, scale_result)


#: torchao ``Float8Linear(emulate=True)``'s matmul (see :func:`torchao_emulated_mm`).
TORCHAO_EMULATE = "torchao-emulate"


def torchao_emulated_mm(ca, fa, div_a, cb, fb, div_b, *, out_dtype=np.float32, bias=None, threads=None,
                        layout="NN"):
    """torchao ``Float8Linear(emulate=True)``'s GEMM on the CPU: ``torch.mm(a / sa, b / sb)``.

    torchao 0.18.0 (``torchao/float8/float8_ops.py``, ``float8_mm`` / ``float8_addmm``, the
    ``emulate`` branch) dequantizes each operand by *dividing* its codes by its scale,
    ``X = fl32(a / sa)`` (per row of A / column of B for row-wise scales), multiplies the
    float32 matrices with ``torch.mm`` (MKL's sgemm: :func:`sgemm`, same order and range as
    ``"torch-cpu-emulated"``), converts to the output dtype (the input's dtype in
    ``Float8Linear``) and only then adds a bias, in that dtype (``out + bias``: float32 sum,
    rounded once to ``out_dtype``).  Division differs from fp8emu's multiplication by
    ``fl(1/s)`` in the last bit of many outputs.

    Parameters
    ----------
    ca, cb : numpy.ndarray of uint8
        Codes, A (M, K) and B (K, N).
    fa, fb : Format
        E4M3FN or E5M2.
    div_a, div_b : float or numpy.ndarray of float32
        torchao's scales (the quantization multipliers, ``fp8_max / amax``): a scalar, or
        (M, 1) for A and (1, N) for B.
    out_dtype : numpy dtype, keyword-only
        float32 or ml_dtypes.bfloat16 (float16 also accepted).
    bias : array of (N,), optional, keyword-only
        Added after the conversion, as ``Float8Linear``'s ``output + bias.to(output.dtype)``.
    threads : int, optional, keyword-only
        torch's thread count, where known (:func:`sgemm`).
    layout : str, keyword-only
        How the dequantized operands reach ``torch.mm`` (:func:`sgemm`).

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> e4 = get_format("e4m3fn")
    >>> a = np.full((2, 1), 0x4B, np.uint8); b = np.full((1, 2), 0x38, np.uint8)   # 5.5 and 1
    >>> torchao_emulated_mm(a, e4, np.float32(3), b, e4, np.float32(1))[0, 0]     # fl(5.5 / 3)
    np.float32(1.8333334)
    """
    odt = np.dtype(out_dtype)
    if odt.name not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"{TORCHAO_EMULATE}: out_dtype must be float32, bfloat16 or float16, got {odt.name}")
    for f in (fa, fb):
        if f.name not in ("e4m3fn", "e5m2"):
            raise ValueError(f"{TORCHAO_EMULATE}: torchao's Float8Linear takes float8_e4m3fn / float8_e5m2 "
                             f"operands, got {f.name}")
    with np.errstate(all="ignore"):
        x = (_f32_values(ca, fa) / np.asarray(div_a, np.float32)).astype(np.float32)
        y = (_f32_values(cb, fb) / np.asarray(div_b, np.float32)).astype(np.float32)
        out = sgemm(x, y, threads=threads, layout=layout, name=TORCHAO_EMULATE, stacklevel=3).astype(odt)
        if bias is not None:
            b = bias_in(np.asarray(bias).reshape(1, -1), odt).astype(np.float32)
            out = (out.astype(np.float32) + b).astype(odt)
    return out
