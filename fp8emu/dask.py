"""fp8emu on ``dask.array``: encode, decode, the scaling recipes and the study's metrics.

Optional extra ``[dask]``.  Every function takes a ``dask.array.Array`` and
gives results bit-identical to the NumPy functions on the whole array:

* :func:`encode`, :func:`decode`, :func:`quantize` map over the chunks
  (element-wise, so any chunking works);
* block recipes (:func:`quantize_blockwise`, :func:`quantize_mx`,
  :func:`quantize_nvfp4`) first rechunk so that chunk boundaries fall on
  block boundaries (no block straddles two chunks), then quantize each chunk;
  :func:`quantize_axiswise` makes the reduced axis one chunk;
* per-tensor scales are two passes: the global amax reduction (computed when
  the function is called), then the map.  NVFP4's tensor scale likewise.
  Delayed scaling is sequential by nature (each step's scale comes from
  earlier steps' amax) and stays per tensor in NumPy
  (:class:`fp8emu.DelayedScaling`);
* :func:`study_metrics` computes the rows of ``fp8emu study`` for one
  tensor from chunk partials merged in chunk order;
* :func:`float32_runs` and :func:`float32_mismatches` sweep all 2**32
  float32 inputs as a graph of tasks, each a range of bit patterns: the
  run-length form of a cast (as in the recorded ``.rle`` tables) and its
  exact mismatch count against a recorded table.

Stochastic rounding is not offered: its random stream depends on how the
array is chunked, so it could not match NumPy bit for bit.

Examples
--------
>>> import numpy as np, dask.array as da, fp8emu
>>> x = np.linspace(-3, 3, 1000).reshape(10, 100)
>>> dx = da.from_array(x, chunks=(3, 40))
>>> bool((encode(dx, "e4m3fn").compute() == fp8emu.encode(x, "e4m3fn")).all())
True
>>> t = quantize_mx(dx, "e4m3fn")
>>> bool((t.compute().codes == fp8emu.quantize_mx(x, "e4m3fn").codes).all())
True
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import codec, conformance, metrics, scaling
from .formats import get_format
from .interop import source_array
from .rounding import STOCHASTIC_MODES
from .tables import decode_dtype
from .lab.recipes import select_recipes, tensor_params, threshold
from .scaling.tensor import axis_arg, block_arg, expand, given_scale, int_arg, reciprocal

__all__ = [
    "encode", "decode", "quantize", "DaskScaledTensor", "amax", "quantize_tensorwise",
    "quantize_axiswise", "quantize_blockwise", "quantize_mx", "quantize_nvfp4", "study_metrics",
    "float32_runs", "float32_mismatches",
]


def _da():
    try:
        import dask.array as da
    except ImportError as exc:   # pragma: no cover - the extra is missing
        raise ImportError("fp8emu.dask needs dask: pip install 'fp8emu[dask]'") from exc
    return da


def _array(x, what="x"):
    da = _da()
    if not isinstance(x, da.Array):
        raise TypeError(f"{what} must be a dask.array.Array, got {type(x).__name__} "
                        "(use the fp8emu functions for NumPy arrays)")
    return x


def _no_stochastic(options):
    if options.get("rounding") in STOCHASTIC_MODES or "rng" in options or "random_bits" in options:
        raise ValueError("stochastic rounding is not available on dask arrays: its random bits depend on "
                         "the chunking; use a deterministic rounding mode")


def encode(x, fmt, **options):
    """Element codes (uint8 dask array) of :func:`fp8emu.encode`, chunk by chunk.

    ``options`` are those of :func:`fp8emu.encode` except the stochastic ones.
    """
    x = _array(x)
    _no_stochastic(options)
    fmt = get_format(fmt)
    # the dtype and options checked now, as fp8emu.encode checks them (a bad profile, rounding or saturate
    # failed only at compute, in every chunk's task)
    codec.encode(np.empty((0,), x.dtype), fmt, **options)
    return x.map_blocks(codec.encode, fmt, dtype=np.uint8, **options)


def decode(codes, fmt, *, dtype=np.float32, profile=None):
    """Values of codes (:func:`fp8emu.decode`), chunk by chunk."""
    codes = _array(codes, "codes")
    fmt = get_format(fmt)
    out = decode_dtype(dtype)       # np.dtype("flaot32") was NumPy's own "data type not understood"
    codec.decode(np.empty((0,), codes.dtype), fmt, dtype=out, profile=profile)   # codes' dtype, profile: now
    # map_blocks keeps ``dtype=`` for itself, so the decode dtype travels under another name.
    return codes.map_blocks(_decode_block, fmt, out_dtype=out, profile=profile, dtype=out)


def _decode_block(c, fmt, out_dtype, profile):
    return codec.decode(c, fmt, dtype=out_dtype, profile=profile)


def quantize(x, fmt, **options):
    """``decode(encode(x))`` in ``x``'s float dtype (:func:`fp8emu.quantize`), chunk by chunk."""
    x = _array(x)
    _no_stochastic(options)
    fmt = get_format(fmt)
    out = np.empty((0,), x.dtype)
    dt = codec.quantize(out, fmt, **options).dtype
    return x.map_blocks(codec.quantize, fmt, dtype=dt, **options)


@dataclasses.dataclass(eq=False)
class DaskScaledTensor:
    """Lazy codes and scales of a scaling recipe; :meth:`compute` gives the NumPy :class:`fp8emu.ScaledTensor`.

    Attributes mirror :class:`fp8emu.ScaledTensor` (``codes``, ``scale``,
    ``scale_inv`` and ``scale_codes`` / ``block_scale_codes`` may be dask
    arrays).
    """

    codes: object
    fmt: object
    scale: object
    scale_inv: object
    block: tuple = ()
    axis: int | None = None
    shape: tuple = ()
    scale_codes: object = None
    block_scale_codes: object = None
    global_scale: object = None
    recipe: str = ""
    global_amax: object = None
    scale_max: object = None
    scale_format: object = None
    scale_format_codes: object = None

    def dequantize(self, dtype=np.float32):
        """Lazy ``decode(codes) * scale_inv`` (per block), as :meth:`fp8emu.ScaledTensor.dequantize`."""
        da = _da()
        out = decode_dtype(dtype, "dequantize")     # as ScaledTensor.dequantize: "int32" truncated the values here
        fmt, block = self.fmt, self.block
        if not block:
            inv = np.float32(self.scale_inv)
            return self.codes.map_blocks(lambda c: _times(codec.decode(c, fmt), inv, out), dtype=out)
        # Code chunks and scale chunks correspond block for block (the recipes aligned them).
        index = tuple(range(self.codes.ndim))
        return da.blockwise(lambda c, s: _times(codec.decode(c, fmt), expand(s, block, c.shape), out),
                            index, self.codes, index, self.scale_inv, index, dtype=out,
                            align_arrays=False, concatenate=False)

    def compute(self, **kwargs):
        """Compute everything and return a NumPy :class:`fp8emu.ScaledTensor`.

        Every field of :class:`fp8emu.ScaledTensor` is carried over (this
        class has them all, see ``tests/test_roundtrip_metadata.py``): the
        lazy ones computed in one ``dask.compute``, the rest as they are.
        """
        import dask
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(scaling.ScaledTensor)}
        lazy = [n for n, v in values.items() if dask.is_dask_collection(v)]
        values.update(zip(lazy, dask.compute(*[values[n] for n in lazy], **kwargs)))
        return scaling.ScaledTensor(**values)


def _times(values, inv, out_dtype):
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.multiply(values, inv, dtype=np.float32).astype(out_dtype)


def _block_amax(b):
    a = np.abs(b.astype(np.float32))
    return np.max(np.where(np.isnan(a), np.float32(0), a), initial=np.float32(0), keepdims=True)


def amax(x) -> np.float32:
    """max ``|x|`` over the whole array, NaN ignored (0 if all NaN), Inf kept: one pass, computed now.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> float(amax(da.from_array(np.array([1.0, np.nan, -3.0]), chunks=1)))
    3.0
    """
    x = _array(x)
    source_array(np.empty((0,), x.dtype))     # a complex array's amax was its real part's, silently
    if x.size == 0:
        return np.float32(0)
    per_block = x.map_blocks(_block_amax, dtype=np.float32, chunks=tuple((1,) * len(c) for c in x.chunks))
    return np.float32(per_block.max().compute())


def _aligned(x, block):
    """Rechunk so each dimension's chunks are multiples of its block size (the last may be shorter)."""
    new = {}
    for d, b in enumerate(block):
        if b > 1:
            size = max(b, (max(x.chunks[d]) // b) * b)
            if any(c % b for c in x.chunks[d][:-1]) or max(x.chunks[d]) != size:
                new[d] = size
    return x.rechunk(new) if new else x


def _per_block_chunks(x, block):
    return tuple(tuple(-(-c // b) for c in cs) for cs, b in zip(x.chunks, block))


def _attr(fn, name):
    """Map over blocks keeping one attribute of each block's ScaledTensor."""
    def one(blk):
        return getattr(fn(blk), name)
    return one


def _scaled(x, block, fn, fmt, recipe, axis=None, extra_scales=(), global_scale=None, **scalars):
    """Quantize each (block-aligned) chunk with ``fn(chunk) -> ScaledTensor``; lazy codes and scales.

    ``scalars`` are the per-tensor fields every chunk shares (``global_amax``, ``scale_max``).
    """
    x = _aligned(_array(x), block)
    codes = x.map_blocks(_attr(fn, "codes"), dtype=np.uint8)
    sc = _per_block_chunks(x, block)
    scale = x.map_blocks(_attr(fn, "scale"), dtype=np.float32, chunks=sc)
    inv = x.map_blocks(_attr(fn, "scale_inv"), dtype=np.float32, chunks=sc)
    extras = {name: x.map_blocks(_attr(fn, name), dtype=np.uint8, chunks=sc) for name in extra_scales}
    return DaskScaledTensor(codes=codes, fmt=get_format(fmt), scale=scale, scale_inv=inv, block=tuple(block),
                            axis=axis, shape=tuple(x.shape), global_scale=global_scale, recipe=recipe, **extras,
                            **scalars)


def _scaled_fmt(x, st_block, fn, fmt, recipe, st_axis, extra_scales=(), global_scale=None, scalars=None, **kw):
    def bound(blk):
        return fn(blk, fmt, **kw) if fmt is not None else fn(blk, **kw)
    return _scaled(x, st_block, bound, fmt if fmt is not None else "e2m1fn", recipe, axis=st_axis,
                   extra_scales=extra_scales, global_scale=global_scale, **(scalars or {}))


def quantize_tensorwise(x, fmt, *, margin=0, pow2=False, eps=0.0, scale=None) -> DaskScaledTensor:
    """:func:`fp8emu.quantize_tensorwise` in two passes: the global amax now, then a lazy map."""
    x = _array(x)
    fmt = get_format(fmt)
    # the options and a given scale checked now, as the NumPy function checks them (np.float32(scale) made
    # 1e39 Inf and "1" or True 1.0, and the chunks' own checks then failed, or not, at compute)
    scaling.quantize_tensorwise(np.zeros((1,) * x.ndim, x.dtype), fmt, margin=margin, pow2=pow2, eps=eps,
                                scale=scale)
    s = scaling.current_scale(amax(x), fmt, margin=margin, pow2=pow2, eps=eps) if scale is None \
        else given_scale(scale, ())
    s = np.float32(s)

    def fn(blk):
        return scaling.quantize_tensorwise(blk, fmt, scale=s)
    codes = x.map_blocks(_attr(fn, "codes"), dtype=np.uint8)
    inv = reciprocal(s)
    return DaskScaledTensor(codes=codes, fmt=fmt, scale=np.asarray(s, np.float32),
                            scale_inv=np.asarray(inv, np.float32), shape=tuple(x.shape), recipe="tensorwise")


def quantize_axiswise(x, fmt, *, axis=-1, margin=0, pow2=False, eps=0.0) -> DaskScaledTensor:
    """:func:`fp8emu.quantize_axiswise` with the reduced ``axis`` in one chunk."""
    x = _array(x)
    if x.ndim == 0:
        raise ValueError("quantize_axiswise needs an array with at least one dimension")
    ax = axis_arg(axis, x.ndim)
    # the options checked now, with the NumPy function (margin="x", pow2="yes" failed only at compute)
    scaling.quantize_axiswise(np.zeros((1,) * x.ndim, x.dtype), fmt, axis=ax, margin=margin, pow2=pow2, eps=eps)
    x = x.rechunk({ax: -1})
    block = tuple(max(s, 1) if d == ax else 1 for d, s in enumerate(x.shape))
    return _scaled_fmt(x, block, scaling.quantize_axiswise, fmt, "axiswise", ax,
                       axis=ax, margin=margin, pow2=pow2, eps=eps)


def quantize_blockwise(x, fmt, *, block=(1, 128), pow2=True, margin=0, eps=0.0) -> DaskScaledTensor:
    """:func:`fp8emu.quantize_blockwise`, rechunked so no block straddles chunks."""
    x = _array(x)
    if x.ndim == 0:
        raise ValueError("quantize_blockwise needs an array with at least one dimension")
    blk = block_arg(block, x.ndim)
    scaling.quantize_blockwise(np.zeros((1,) * x.ndim, x.dtype), fmt, block=blk, pow2=pow2, margin=margin, eps=eps)
    return _scaled_fmt(x, blk, scaling.quantize_blockwise, fmt, "blockwise", None,
                       block=blk, pow2=pow2, margin=margin, eps=eps)


def quantize_mx(x, elem_format, *, block=32, axis=-1, scale_rule="floor") -> DaskScaledTensor:
    """:func:`fp8emu.quantize_mx`, rechunked so no block straddles chunks."""
    x = _array(x)
    if x.ndim == 0:
        raise ValueError("quantize_mx needs an array with at least one dimension")
    ax = axis_arg(axis, x.ndim)
    b = int_arg(block, "block", minimum=1)
    blk = tuple(b if d == ax else 1 for d in range(x.ndim))
    # Validate format and rule once, eagerly, with the NumPy function.
    scaling.quantize_mx(np.zeros((1,) * x.ndim, x.dtype), elem_format, block=b, axis=ax, scale_rule=scale_rule)
    return _scaled_fmt(x, blk, scaling.quantize_mx, elem_format, f"mx-{scale_rule}", ax,
                       extra_scales=("scale_codes",), block=b, axis=ax, scale_rule=scale_rule)


def quantize_nvfp4(x, *, axis=-1, global_amax=None) -> DaskScaledTensor:
    """:func:`fp8emu.quantize_nvfp4` (round to nearest even) in two passes: global amax, then the map."""
    x = _array(x)
    if x.ndim == 0:
        raise ValueError("quantize_nvfp4 needs an array with at least one dimension")
    ax = axis_arg(axis, x.ndim)
    g = amax(x) if global_amax is None else global_amax
    blk = tuple(16 if d == ax else 1 for d in range(x.ndim))
    probe = scaling.quantize_nvfp4(np.zeros((1,) * x.ndim, x.dtype), axis=ax, global_amax=g)
    return _scaled_fmt(x, blk, scaling.quantize_nvfp4, None, probe.recipe, ax,
                       extra_scales=("block_scale_codes",), global_scale=probe.global_scale,
                       scalars={"global_amax": probe.global_amax, "scale_max": probe.scale_max},
                       axis=ax, global_amax=g)


# --------------------------------------------------------------------------- study metrics

def _errors(x, names, params):
    recipes = {r.name: r for r in select_recipes(list(names))}
    out = []
    for n in names:
        q = recipes[n].apply(x, params)
        out.append(metrics.error_partial(x, q.y, q.codes, q.q, recipes[n].fmt))
    return out


def study_metrics(x, recipes=None, *, rows_per_chunk=None) -> list:
    """The metric columns of ``fp8emu study`` for one tensor held as a dask array.

    ``x`` is viewed as rows of its last axis (as :func:`fp8emu.metrics.as_matrix`),
    rechunked to whole rows and ``rows_per_chunk`` rows per chunk (a multiple
    of 128; default: from ``x``'s chunks), so every recipe's blocks stay
    within a chunk.  Three passes over the chunks (statistics, calibration
    histogram when needed, recipe errors); partials merge in chunk order, so
    the result equals :func:`fp8emu.lab.study.study_tensor` run with the same
    chunk rows.

    Returns
    -------
    list of dict
        One per recipe: ``recipe``, ``format``, the input columns
        (:func:`fp8emu.metrics.input_summary`), the metric columns
        (:func:`fp8emu.metrics.error_summary`) and ``clip_threshold``.
    """
    import dask
    x = _array(x)
    recs = select_recipes(recipes if recipes is None or isinstance(recipes, str) else list(recipes))
    k = x.shape[-1] if x.ndim else 1
    xm = x.astype(np.float32).reshape((-1, k) if x.ndim > 1 else (1, -1) if x.ndim == 1 else (1, 1))
    if rows_per_chunk is None:
        rows_per_chunk = max(128, (max(xm.chunks[0]) // 128) * 128)
    else:
        # 0 was a ZeroDivisionError, -128 dask's own message, 10**20 NumPy's, 128.0 a float chunk size
        rows_per_chunk = int_arg(rows_per_chunk, "rows_per_chunk", minimum=128)
        if rows_per_chunk % 128:
            raise ValueError(f"rows_per_chunk must be a multiple of 128, got {rows_per_chunk}")
    # past the rows it is one chunk whatever the count (a chunk of 10**20 rows overflowed in dask)
    rows_per_chunk = min(rows_per_chunk, max(128, -(-xm.shape[0] // 128) * 128))
    xm = xm.rechunk((rows_per_chunk, -1))
    blocks = list(xm.to_delayed().ravel())
    part = dask.delayed(metrics.input_partial)
    stats = metrics.combine(dask.compute(*[part(b) for b in blocks]))
    hist = None
    if any(r.needs_histogram for r in recs):
        h = dask.delayed(metrics.calibration_histogram)
        hist = sum(dask.compute(*[h(b, stats["amax"]) for b in blocks]))
    params = tensor_params(stats["amax"], stats["n_inf"], hist)
    for r in recs:
        if r.calibration:
            threshold(params, r.fmt, r.calibration)
    names = tuple(r.name for r in recs)
    parts = dask.compute(*[dask.delayed(_errors)(b, names, params) for b in blocks])
    summary = metrics.input_summary(stats)
    out = []
    for i, r in enumerate(recs):
        err = metrics.error_summary(metrics.combine([p[i] for p in parts]))
        clip = params["thresholds"][f"{r.calibration}/{r.fmt}"] if r.calibration else ""
        out.append(dict(recipe=r.name, format=r.fmt, **summary, **err, clip_threshold=clip))
    return out


# --------------------------------------------------------------------------- exhaustive float32 sweeps

_ALL = 1 << 32


def _range_arg(lo, hi, task_size):
    lo, hi = int_arg(lo, "lo", minimum=0), int_arg(hi, "hi", minimum=0)
    task_size = int_arg(task_size, "task_size", minimum=1)
    if not 0 <= lo < hi <= _ALL:
        raise ValueError(f"need 0 <= lo < hi <= 2**32, got lo={lo}, hi={hi}")
    if task_size < 1:
        raise ValueError(f"task_size must be >= 1, got {task_size}")
    return [(a, min(a + task_size, hi)) for a in range(lo, hi, task_size)]


def _patterns(a, b):
    return np.arange(b - a, dtype=np.uint32) + np.uint32(a)


def _runs_of_range(a, b, fmt, options):
    codes = codec.encode(_patterns(a, b).view(np.float32), fmt, **options).astype(np.int64)
    change = np.flatnonzero(np.diff(codes)) + 1
    keep = np.concatenate([[0], change])
    return np.uint64(a) + keep.astype(np.uint64), codes[keep]


def float32_runs(fmt, *, lo=0, hi=_ALL, task_size=1 << 24, **options) -> tuple:
    """Run-length form of ``encode(x, fmt, **options)`` over float32 bit patterns ``[lo, hi)``.

    Every input is encoded (no table shortcut): one task per ``task_size``
    patterns, run with the current Dask scheduler (a ``distributed.Client``
    if one is active), each returning its runs; the pieces are joined in
    order.  Over the whole range the result equals the ``.rle`` recordings'
    layout: ``starts`` (uint64, the first pattern of each run) and ``codes``.

    Examples
    --------
    >>> s, c = float32_runs("e2m1fn", lo=0x3F800000, hi=0x40000000, task_size=1 << 21)
    >>> [hex(int(v)) for v in s], c.tolist()      # [1, 2): 1, 1.5 and their ties
    (['0x3f800000', '0x3fa00001', '0x3fe00000'], [2, 3, 4])
    """
    import dask
    fmt = get_format(fmt)
    _no_stochastic(options)
    task = dask.delayed(_runs_of_range, pure=True)
    pieces = dask.compute(*[task(a, b, fmt, options) for a, b in _range_arg(lo, hi, task_size)])
    starts = np.concatenate([p[0] for p in pieces])
    codes = np.concatenate([p[1] for p in pieces])
    keep = np.ones(codes.size, dtype=bool)
    keep[1:] = codes[1:] != codes[:-1]
    return starts[keep], codes[keep]


def _expand_runs(starts, codes, a, b):
    """The recorded code of every pattern in [a, b), by repeating the overlapping runs."""
    i0 = int(np.searchsorted(starts, np.uint64(a), side="right")) - 1
    i1 = int(np.searchsorted(starts, np.uint64(b), side="left"))
    s = starts[i0:i1].astype(np.int64)
    s[0] = a
    return np.repeat(codes[i0:i1], np.diff(np.append(s, b)))


def _given_table(recorded, fmt):
    """``(starts, codes)`` given in place of a ``.rle`` file, checked as :func:`fp8emu.conformance.read_rle`
    checks a file: runs from pattern 0 on, increasing, below 2**32, one code of ``fmt`` per run (a first
    run past 0 was read from the last run's code, unsorted starts were NumPy's "negative repeats")."""
    if len(recorded) != 2:
        raise ValueError(f"recorded must be a .rle path or (starts, codes), got {len(recorded)} items")
    s, c = (np.asarray(v) for v in recorded)
    if s.ndim != 1 or c.ndim != 1 or s.size == 0:
        raise ValueError(f"recorded (starts, codes) must be two 1-D arrays of runs, got shapes {s.shape}, {c.shape}")
    if s.dtype.kind not in "iu" or c.dtype.kind not in "iu":
        raise ValueError(f"recorded starts and codes must be integer arrays, got {s.dtype} and {c.dtype}")
    if c.size != s.size:
        raise ValueError(f"recorded has one code per run: {s.size} starts but {c.size} codes")
    if int(s[0]) != 0:
        raise ValueError(f"recorded: the first run must start at pattern 0, got {int(s[0]):#x}")
    if np.any(np.diff(s.astype(np.int64)) <= 0):
        raise ValueError("recorded: run starts must be increasing")
    if int(s[-1]) >= _ALL:
        raise ValueError(f"recorded: run starts are float32 patterns, below 2**32; got {int(s[-1]):#x}")
    if int(c.min()) < 0 or int(c.max()) >= 1 << fmt.bits:
        raise ValueError(f"recorded: codes of {fmt.name} lie in 0..{(1 << fmt.bits) - 1}, got "
                         f"{int(c.min())}..{int(c.max())}")
    return s.astype(np.uint64), c.astype(np.int64)


def _mismatches_of_range(a, b, fmt, options, starts, codes):
    got = codec.encode(_patterns(a, b).view(np.float32), fmt, **options)
    return int(np.count_nonzero(got != _expand_runs(starts, codes, a, b)))


def float32_mismatches(recorded, fmt, *, lo=0, hi=_ALL, task_size=1 << 24, **options) -> int:
    """Inputs in ``[lo, hi)`` where ``encode(x, fmt, **options)`` differs from a recorded run-length table.

    ``recorded`` is a ``.rle`` path or ``(starts, codes)``.  Every float32
    pattern is encoded and compared, one task per ``task_size`` patterns, on
    the current Dask scheduler: the brute-force counterpart of
    :func:`fp8emu.conformance.report`'s run intersection.

    Examples
    --------
    >>> from fp8emu.data import golden_path
    >>> float32_mismatches(golden_path("torch_f32_e4m3fn.rle"), "e4m3fn", profile="torch-cuda-2.11",
    ...                    lo=0x43000000, hi=0x44000000, task_size=1 << 22)
    0
    """
    import dask
    fmt = get_format(fmt)
    _no_stochastic(options)
    if isinstance(recorded, (tuple, list)):
        starts, codes = _given_table(recorded, fmt)
    else:
        starts, codes, n = conformance.read_rle(recorded)
        if n != _ALL:
            raise ValueError(f"{recorded} is not a float32 table ({n} inputs)")
    # One graph node per table, shared by every task (not a copy embedded in each).
    starts, codes = dask.delayed(starts, pure=True), dask.delayed(codes, pure=True)
    task = dask.delayed(_mismatches_of_range, pure=True)
    return int(sum(dask.compute(*[task(a, b, fmt, options, starts, codes)
                                  for a, b in _range_arg(lo, hi, task_size)])))
