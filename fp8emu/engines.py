"""Run narrow-format casts through the real engines: ONNX, ONNX Runtime, JAX and torch on the CPU.

Each runner takes a NumPy array of source values (float32, float16,
bfloat16 or float64), casts it through the engine itself and returns the
narrow codes as ``uint8`` (FP4 codes in the low bits), read from the
engine's own output bytes so that no wider type hides a NaN code.  The
decode runners do the reverse: codes in, the engine's float output out.
They prove the engine profiles of :mod:`fp8emu.profiles` on every test run
and drive ``fp8emu conformance --live``.

The engines are optional: each is imported only inside the function that
runs it, and :func:`installed_engines` says which are present.

Each engine's profiles name the library versions they are proven for
(:attr:`fp8emu.profiles.Profile.versions`; :func:`engine_versions`).  The
ONNX reference evaluator casts through ml_dtypes, so its result depends on
the installed ml_dtypes too: :func:`engine_profile` gives the variant for
the installed versions (``onnx-ml_dtypes-0.6`` or ``onnx-ml_dtypes-0.7``).
What each engine casts (:data:`ENGINE_FORMATS`, :data:`ENGINE_SOURCES`) was
found on the proven versions; casts they lack there:
ONNX Runtime 1.32's CPU provider has no FLOAT4E2M1/FLOAT6 Cast and no
bfloat16 QuantizeLinear; XLA on the CPU rejects JAX's float6 types; torch's
``float4_e2m1fn_x2`` has no CPU conversion kernel.  ONNX models use the
current opset of onnx 1.23 (28) for the reference evaluator and opset 25
for ONNX Runtime, whose 1.32 CPU provider has no QuantizeLinear-28 kernel.

Examples
--------
>>> import numpy as np
>>> from fp8emu import engines
>>> "onnx" in engines.ENGINES
True
>>> if "onnxruntime-cpu" in engines.installed_engines():
...     codes = engines.engine_cast("onnxruntime-cpu", np.array([470.0, 490.0], np.float32),
...                                 "e4m3fn", saturate=False)
...     print(codes.tolist())
[127, 126]
"""

from __future__ import annotations

import ctypes
import functools
import warnings

import numpy as np

from .codec import decode, encode
from .conformance import KINDS, classify_differences
from .formats import ML_DTYPES_NAMES, get_format
from .interop import byte_codes
from .profiles import get_profile, installed_version, resolve_versioned, versioned_names
from .tables import SOURCE_DTYPES, source_name

__all__ = ["ENGINES", "ENGINE_SOURCES", "ENGINE_FORMATS", "installed_engines", "engine_versions",
           "engine_cast", "engine_decode", "engine_options", "engine_profile", "engine_profiles", "probe_inputs",
           "version_check", "live_report", "live_markdown"]

#: Engine names, each with the Python distributions it needs.
ENGINES = {
    "onnx": ("onnx",),
    "onnxruntime-cpu": ("onnxruntime", "onnx"),
    "jax-cpu": ("jax", "jaxlib"),
    "torch-cpu": ("torch",),
}

_FLOAT64 = SOURCE_DTYPES["float64"]
_BFLOAT16 = SOURCE_DTYPES["bfloat16"]

#: Source dtypes each engine's cast accepts.
ENGINE_SOURCES = {
    "onnx": ("float32", "float16", "bfloat16", "float64"),
    "onnxruntime-cpu": ("float32", "float16", "bfloat16", "float64"),
    "jax-cpu": ("float32", "float16", "bfloat16", "float64"),
    "torch-cpu": ("float32", "float16", "bfloat16", "float64"),
}

#: Narrow formats each engine casts to and from (fp8emu names).
ENGINE_FORMATS = {
    "onnx": ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e2m1fn", "e2m3fn", "e3m2fn", "e8m0fnu"),
    "onnxruntime-cpu": ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0fnu"),
    "jax-cpu": ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e4m3", "e3m4", "e8m0fnu",
                "e2m1fn"),
    "torch-cpu": ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu"),
}

# ONNX TensorProto data types (numbers fixed by onnx.proto, so no import is needed to name them).
_ONNX_TYPE = {"e4m3fn": 17, "e4m3fnuz": 18, "e5m2": 19, "e5m2fnuz": 20, "e2m1fn": 23, "e8m0fnu": 24,
              "e2m3fn": 27, "e3m2fn": 28, "float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}
_ONNX_OPSET = 28           # onnx 1.23's current opset (FLOAT8E8M0 and round_mode from 24, FLOAT6 from 28)
_ORT_OPSET = 25            # ONNX Runtime 1.32 has no QuantizeLinear-28 kernel; 25 has both ops' last FP8 changes
_ONNX_IR = 11
_ROUND_MODE = {"rup": "up", "rtz": "down", "rne": "nearest"}
_SUBBYTE = ("e2m1fn", "e2m3fn", "e3m2fn")


def installed_engines() -> dict:
    """Installed engines and the versions that decide their casts: ``{engine: {distribution: version}}``.

    Each engine's own distributions (:data:`ENGINES`), then any other
    library its profiles depend on (ml_dtypes for the ONNX reference).
    Reads the installed distributions' metadata; imports none of them.

    Examples
    --------
    >>> from fp8emu.engines import ENGINES, installed_engines
    >>> set(installed_engines()) <= set(ENGINES)
    True
    """
    out = {}
    for engine, dists in ENGINES.items():
        versions = {d: installed_version(d) for d in dists}
        if None in versions.values():
            continue
        for d in _depends_on(engine):
            v = installed_version(d)
            if d not in versions and v is not None:
                versions[d] = v
        out[engine] = versions
    return out


def _plain_profiles(engine):
    """The profile names an engine's settings map to (before a versioned name picks its variant)."""
    if engine in ("onnx", "onnxruntime-cpu"):
        return (engine, f"{engine}-nosat")
    return (engine,)


def engine_profiles(engine, installed=None) -> tuple:
    """The profiles describing ``engine``'s settings for the given (default: installed) versions.

    Parameters
    ----------
    engine : str
    installed : mapping, optional
        ``{distribution: version}`` to decide versioned profiles with (see
        :func:`fp8emu.profiles.resolve_versioned`).

    Examples
    --------
    >>> from fp8emu.engines import engine_profiles
    >>> [p.name for p in engine_profiles("onnx", {"onnx": "1.23.2", "ml_dtypes": "0.6.0"})]
    ['onnx-ml_dtypes-0.6', 'onnx-nosat-ml_dtypes-0.6']
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    out = []
    for name in _plain_profiles(engine):
        if name in versioned_names():
            out.append(get_profile(name) if installed is None else resolve_versioned(name, installed))
        else:
            out.append(get_profile(name))
    return tuple(out)


def _depends_on(engine):
    names = set()
    for name in _plain_profiles(engine):
        variants = versioned_names().get(name, (name,))
        for v in variants:
            names.update(r.distribution for r in get_profile(v).versions)
    return tuple(sorted(names - set(ENGINES[engine])))


def engine_versions(engine, installed=None) -> tuple:
    """The version ranges ``engine``'s profiles are proven for (one per library that decides the result).

    Examples
    --------
    >>> from fp8emu.engines import engine_versions
    >>> [str(r) for r in engine_versions("torch-cpu")]
    ['torch >=2.13.0,<2.14 (proven on 2.13.0+cpu)']
    """
    seen = {}
    for p in engine_profiles(engine, installed):
        for r in p.versions:
            seen.setdefault(r.distribution, r)
    return tuple(seen.values())


def engine_options(engine, fmt) -> list:
    """The cast settings an engine offers for ``fmt``, as keyword dicts for :func:`engine_cast`.

    ONNX and ONNX Runtime: ``saturate`` False/True (E8M0: with each
    ``rounding`` of Cast's ``round_mode``; FP4/FP6 ignore ``saturate``);
    JAX and torch: one plain cast.

    Examples
    --------
    >>> from fp8emu.engines import engine_options
    >>> engine_options("onnx", "e4m3fn")
    [{'saturate': False}, {'saturate': True}]
    >>> engine_options("torch-cpu", "e5m2")
    [{}]
    """
    _check(engine, fmt)
    if engine in ("onnx", "onnxruntime-cpu"):
        if fmt in _SUBBYTE:   # no Inf/NaN: Cast ignores saturate
            return [{}]
        sats = [{"saturate": False}, {"saturate": True}]
        if fmt == "e8m0fnu":
            return [dict(s, rounding=r) for r in ("rup", "rtz", "rne") for s in sats]
        return sats
    return [{}]


def _check(engine, fmt, src=None):
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if fmt not in ENGINE_FORMATS[engine]:
        raise ValueError(f"engine {engine!r} has no cast to {fmt!r}; it has: "
                         f"{', '.join(ENGINE_FORMATS[engine])}")
    if src is not None and src not in ENGINE_SOURCES[engine]:
        raise ValueError(f"engine {engine!r} does not cast from {src}; it casts from: "
                         f"{', '.join(ENGINE_SOURCES[engine])}")


def _source_name(dtype) -> str:
    try:
        return source_name(dtype)
    except ValueError:
        raise TypeError(f"engine casts take float32, float16, bfloat16 or float64 arrays, got {dtype}") from None


def engine_cast(engine, x, fmt, *, saturate=None, rounding=None, op="Cast", jit=True) -> np.ndarray:
    """Cast ``x`` to ``fmt`` through the real ``engine``; the codes it produced, as uint8.

    Parameters
    ----------
    engine : {"onnx", "onnxruntime-cpu", "jax-cpu", "torch-cpu"}
    x : numpy.ndarray of float32, float16, bfloat16 or float64
    fmt : str
        fp8emu format name (see :data:`ENGINE_FORMATS`).
    saturate : bool, optional
        ONNX ``saturate`` attribute (None: leave it out, i.e. the operator's default, 1).
    rounding : {"rup", "rtz", "rne"}, optional
        ONNX E8M0 ``round_mode`` ("up", "down", "nearest"); None leaves it out ("up").
    op : {"Cast", "QuantizeLinear"}
        ONNX operator (QuantizeLinear with scale 1 and no zero point).
    jit : bool
        JAX: run the cast under ``jax.jit`` (True) or eagerly.

    Returns
    -------
    numpy.ndarray of uint8, the shape of ``x``

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.engines import engine_cast, installed_engines
    >>> if "onnx" in installed_engines():
    ...     print(engine_cast("onnx", np.array([1.0, -2.0], np.float32), "e8m0fnu").tolist())
    [127, 128]
    """
    x = np.asarray(x)
    src = _source_name(x.dtype)
    _check(engine, fmt, src)
    if engine not in ("onnx", "onnxruntime-cpu") and (saturate is not None or rounding is not None
                                                      or op != "Cast"):
        raise ValueError(f"saturate, rounding and op are ONNX settings; {engine} has one plain cast")
    if rounding is not None and (fmt != "e8m0fnu" or rounding not in _ROUND_MODE):
        raise ValueError(f"rounding applies to e8m0fnu only, one of {', '.join(_ROUND_MODE)}; "
                         f"got {rounding!r} for {fmt}")
    if op not in ("Cast", "QuantizeLinear"):
        raise ValueError(f"op must be 'Cast' or 'QuantizeLinear', got {op!r}")
    if op == "QuantizeLinear" and fmt == "e8m0fnu":
        raise ValueError("QuantizeLinear has no FLOAT8E8M0 output")
    flat = np.ascontiguousarray(x).reshape(-1)
    if engine == "onnx":
        out = _onnx_ref_cast(flat, src, fmt, saturate, rounding, op)
    elif engine == "onnxruntime-cpu":
        out = _ort_cast(flat, src, fmt, saturate, rounding, op)
    elif engine == "jax-cpu":
        out = _jax_cast(flat, fmt, jit)
    else:
        out = _torch_cast(flat, fmt)
    return out.reshape(x.shape)


def engine_decode(engine, codes, fmt, dtype) -> np.ndarray:
    """Values of ``codes`` (uint8) in ``dtype`` as ``engine`` converts them (bit patterns kept).

    Parameters
    ----------
    engine : {"onnx", "onnxruntime-cpu", "jax-cpu", "torch-cpu"}
    codes : numpy.ndarray of uint8
        Codes of ``fmt`` (FP4/FP6 in the low bits).
    fmt : str
        fp8emu format name (see :data:`ENGINE_FORMATS`).
    dtype : {float32, float16, bfloat16, float64}
        Output type of the engine's cast.

    Returns
    -------
    numpy.ndarray of ``dtype``, the shape of ``codes``

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.engines import engine_decode, installed_engines
    >>> if "jax-cpu" in installed_engines():
    ...     print(engine_decode("jax-cpu", np.array([0x38], np.uint8), "e4m3fn", np.float32).tolist())
    [1.0]
    """
    dtype = np.dtype(dtype)
    src = _source_name(dtype)
    _check(engine, fmt, src)
    codes = np.ascontiguousarray(byte_codes(codes, get_format(fmt), "codes"))
    flat = codes.reshape(-1)
    if engine in ("onnx", "onnxruntime-cpu"):
        out = _onnx_decode(engine, flat, fmt, src)
    elif engine == "jax-cpu":
        out = _jax_decode(flat, fmt, dtype)
    else:
        out = _torch_decode(flat, fmt, dtype)
    return out.reshape(codes.shape)


# ----------------------------------------------------------------------------- ONNX models
@functools.lru_cache(maxsize=64)
def _cast_model(src, fmt, saturate, rounding, op, opset):
    """Serialized one-node model: input ``x`` (src) -> output ``y`` (fmt)."""
    from onnx import helper
    to = _ONNX_TYPE[fmt]
    attrs = {}
    if saturate is not None:
        attrs["saturate"] = int(saturate)
    inputs = ["x"]
    inits = []
    if op == "Cast":
        attrs["to"] = to
        if rounding is not None:
            attrs["round_mode"] = _ROUND_MODE[rounding]
    else:
        one = np.ones((), SOURCE_DTYPES[src])
        inits.append(helper.make_tensor("scale", _ONNX_TYPE[src], [], one.tobytes(), raw=True))
        attrs["output_dtype"] = to
        inputs.append("scale")
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", _ONNX_TYPE[src], [None])],
                              [helper.make_tensor_value_info("y", to, [None])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = _ONNX_IR
    return model.SerializeToString()


@functools.lru_cache(maxsize=64)
def _decode_model(fmt, src, n, opset):
    """Model with the codes 0..n-1 of ``fmt`` as a constant, cast to ``src``."""
    from onnx import helper, numpy_helper
    codes = np.arange(n, dtype=np.uint8).view(get_format(fmt).ml_dtype)
    # from_array packs sub-byte types (two FP4 codes a byte, four FP6 codes in three bytes).
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(codes, "v"))
    node = helper.make_node("Cast", ["c"], ["y"], to=_ONNX_TYPE[src])
    graph = helper.make_graph([const, node], "decode", [],
                              [helper.make_tensor_value_info("y", _ONNX_TYPE[src], [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = _ONNX_IR
    return model.SerializeToString()


def _onnx_ref_cast(flat, src, fmt, saturate, rounding, op):
    import onnx
    from onnx.reference import ReferenceEvaluator
    ev = ReferenceEvaluator(onnx.load_from_string(_cast_model(src, fmt, saturate, rounding, op, _ONNX_OPSET)))
    with np.errstate(all="ignore"):   # NaN/overflow casts are what is being measured
        y = ev.run(None, {"x": flat})[0]
    y = np.asarray(y)
    if y.dtype.itemsize != 1:
        raise RuntimeError(f"onnx reference returned {y.dtype} for {fmt}, expected a one-byte type")
    return y.view(np.uint8).copy()


@functools.lru_cache(maxsize=64)
def _ort_session(model_bytes):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _ort_value(arr, onnx_type):
    """An OrtValue holding ``arr``'s bytes as ``onnx_type`` (works for types NumPy does not name)."""
    import onnxruntime as ort
    v = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), onnx_type)
    ctypes.memmove(v.data_ptr(), arr.ctypes.data, arr.nbytes)
    return v


def _ort_bytes(value, nbytes):
    buf = (ctypes.c_uint8 * nbytes).from_address(value.data_ptr())
    return np.frombuffer(buf, np.uint8).copy()


# Elements per ONNX Runtime call: bounds the engine's own temporaries.
_ORT_CHUNK = 1 << 24


def _ort_cast(flat, src, fmt, saturate, rounding, op):
    sess = _ort_session(_cast_model(src, fmt, saturate, rounding, op, _ORT_OPSET))
    out = np.empty(flat.size, np.uint8)
    for i in range(0, flat.size, _ORT_CHUNK):
        part = np.ascontiguousarray(flat[i:i + _ORT_CHUNK])
        io = sess.io_binding()
        io.bind_ortvalue_input("x", _ort_value(part, _ONNX_TYPE[src]))
        y = _ort_value(np.zeros(part.size, np.uint8), _ONNX_TYPE[fmt])
        io.bind_ortvalue_output("y", y)
        sess.run_with_iobinding(io)
        out[i:i + part.size] = _ort_bytes(y, part.size)
    return out


def _onnx_decode(engine, flat, fmt, src):
    n = 1 << get_format(fmt).bits
    model = _decode_model(fmt, src, n, _ONNX_OPSET if engine == "onnx" else _ORT_OPSET)
    dt = SOURCE_DTYPES[src]
    if engine == "onnx":
        import onnx
        from onnx.reference import ReferenceEvaluator
        table = np.asarray(ReferenceEvaluator(onnx.load_from_string(model)).run(None, {})[0])
        if table.dtype != dt:
            raise RuntimeError(f"onnx reference decoded {fmt} to {table.dtype}, expected {dt}")
    else:
        sess = _ort_session(model)
        io = sess.io_binding()
        y = _ort_value(np.zeros(n, dt), _ONNX_TYPE[src])
        io.bind_ortvalue_output("y", y)
        sess.run_with_iobinding(io)
        table = _ort_bytes(y, n * dt.itemsize).view(dt)
    return table[flat]


# ----------------------------------------------------------------------------- JAX and torch
def _jax_dtype(fmt):
    import jax.numpy as jnp
    name = {"e2m1fn": "float4_e2m1fn"}.get(fmt, f"float8_{fmt}")
    return getattr(jnp, name)


@functools.lru_cache(maxsize=64)
def _jax_jitted(fmt):
    import jax
    dt = _jax_dtype(fmt)
    return jax.jit(lambda v: v.astype(dt))


def _jax_cast(flat, fmt, jit):
    import jax
    import jax.numpy as jnp
    cpu = jax.devices("cpu")[0]
    # float64 needs 64-bit mode, else jnp.asarray would round it to float32 before the cast.
    with jax.enable_x64(flat.dtype == _FLOAT64):
        a = jax.device_put(flat, cpu)
        y = _jax_jitted(fmt)(a) if jit else jnp.asarray(a).astype(_jax_dtype(fmt))
        return np.asarray(y).view(np.uint8).copy()


def _jax_decode(flat, fmt, dtype):
    import jax
    import jax.numpy as jnp
    cpu = jax.devices("cpu")[0]
    with jax.enable_x64(dtype == _FLOAT64):
        a = jax.device_put(flat.view(get_format(fmt).ml_dtype), cpu)
        y = np.asarray(jnp.asarray(a).astype(dtype))
    if y.dtype != dtype:
        raise RuntimeError(f"jax decoded to {y.dtype}, expected {dtype}")
    return y.copy()


def _torch_tensor(flat):
    import torch
    if flat.dtype == _BFLOAT16:   # torch.from_numpy has no bfloat16: hand over the bits
        return torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(flat)


def _torch_cast(flat, fmt):
    import torch
    y = _torch_tensor(flat).to(getattr(torch, ML_DTYPES_NAMES[fmt]))
    return y.view(torch.uint8).numpy().copy()


def _torch_decode(flat, fmt, dtype):
    import torch
    t = torch.from_numpy(flat.copy()).view(getattr(torch, ML_DTYPES_NAMES[fmt]))
    if dtype == _BFLOAT16:
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(_BFLOAT16).copy()
    return t.to(getattr(torch, source_name(dtype))).numpy().copy()


# ----------------------------------------------------------------------------- profiles and probes
def engine_profile(engine, fmt, *, saturate=None, rounding=None, installed=None):
    """The profile (name) and rounding option that describe an engine setting.

    ONNX's ``saturate`` defaults to 1 and its ``round_mode`` to "up": an
    omitted attribute is the saturating profile and ``rounding="rup"``.
    The ONNX reference's profile is the variant for the installed (or the
    given ``installed``) ml_dtypes version.

    Examples
    --------
    >>> from fp8emu.engines import engine_profile
    >>> engine_profile("onnxruntime-cpu", "e4m3fn", saturate=False)
    ('onnxruntime-cpu-nosat', 'rne')
    >>> engine_profile("onnx", "e8m0fnu", installed={"onnx": "1.23.2", "ml_dtypes": "0.7.0"})
    ('onnx-ml_dtypes-0.7', 'rup')
    """
    _check(engine, fmt)
    if engine in ("onnx", "onnxruntime-cpu"):
        sat, nosat = engine_profiles(engine, installed)
        name = (sat if saturate is None or saturate else nosat).name
        return name, (rounding or "rup") if fmt == "e8m0fnu" else "rne"
    return engine, "rne"


def probe_inputs(src, n_random=1 << 16, seed=0) -> np.ndarray:
    """Inputs that reach every decision of a cast from ``src``, plus random bit patterns.

    float16/bfloat16: all 2**16 patterns.  float32: every upper half (so
    every binade boundary, every midpoint of a format with at most 6
    mantissa bits, subnormals, +-Inf and NaN payloads of both signs) with the
    lower halves 0, 1, 0x7FFF, 0x8000, 0x8001 and 0xFFFF (exact, +-1 ulp
    around midpoints), plus ``n_random`` random patterns.  float64: the
    float32 probes widened and moved by -2..+2 ulp, every upper 19 bits with
    and without a sticky bit, and random patterns.

    Examples
    --------
    >>> from fp8emu.engines import probe_inputs
    >>> probe_inputs("float16").size, probe_inputs("float32", 0).size
    (65536, 393216)
    """
    if src not in SOURCE_DTYPES:
        raise ValueError(f"unknown source {src!r}; valid: {', '.join(SOURCE_DTYPES)}")
    rng = np.random.default_rng(seed)
    if src in ("float16", "bfloat16"):
        return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(SOURCE_DTYPES[src])
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    f32 = (hi[:, None] | lows[None, :]).reshape(-1)
    f32 = np.concatenate([f32, rng.integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32)])
    if src == "float32":
        return f32.view(np.float32)
    with np.errstate(invalid="ignore"):
        w = f32[::3].view(np.float32).astype(np.float64).view(np.uint64)
    near = (w[:, None] + np.arange(-2, 3, dtype=np.int64).astype(np.uint64)[None, :]).reshape(-1)
    hi19 = np.arange(1 << 19, dtype=np.uint64) << np.uint64(45)
    rand = rng.integers(0, np.iinfo(np.uint64).max, n_random, dtype=np.uint64, endpoint=True)
    return np.concatenate([near, hi19, hi19 | np.uint64(1), rand]).view(np.float64)


def version_check(installed=None) -> list:
    """Installed library versions outside the range an engine's profiles are proven for.

    Every library that decides an engine's casts is checked (ml_dtypes too,
    for the ONNX reference).  Returns ``[(engine, distribution, installed
    version, proven range)]``, the range as text.

    Examples
    --------
    >>> from fp8emu.engines import version_check
    >>> version_check({"torch-cpu": {"torch": "2.14.0"}})
    [('torch-cpu', 'torch', '2.14.0', 'torch >=2.13.0,<2.14 (proven on 2.13.0+cpu)')]
    """
    installed = installed_engines() if installed is None else installed
    out = []
    for engine, versions in installed.items():
        with warnings.catch_warnings():   # an out-of-range version is what this reports
            warnings.simplefilter("ignore")
            ranges = engine_versions(engine, versions)
        for r in ranges:
            v = versions.get(r.distribution)
            if v is not None and not r.contains(v):
                out.append((engine, r.distribution, v, str(r)))
    return out


def _proven(engine, versions):
    """Whether every deciding version installed is one the engine's profiles were proven on."""
    return all(versions.get(r.distribution) in r.proven for r in engine_versions(engine, versions)
               if versions.get(r.distribution) is not None)


def _setting_text(opt):
    parts = []
    if "saturate" in opt:
        parts.append(f"saturate={int(opt['saturate'])}")
    if "rounding" in opt:
        parts.append(f"round_mode={_ROUND_MODE[opt['rounding']]}")
    return ", ".join(parts) or "-"


def live_report(engines=None, n_random=1 << 16, progress=None) -> list:
    """Run every installed engine's casts and compare them with its profile and with the spec.

    One row per engine, format and setting (saturation, E8M0 round mode),
    summed over the engine's source types (:func:`probe_inputs` each),
    with the decode direction checked for every code and output type.

    Keys: ``engine``, ``version`` (every library that decides its casts,
    e.g. ``"onnx 1.23.2, ml_dtypes 0.7.0"``), ``proven`` (True when each of
    those versions is one the profiles were proven on),
    ``format``, ``setting``, ``profile``, ``inputs``, ``mismatches``
    (engine vs profile, encode; ``profile`` names the variant used),
    ``decode_mismatches`` (codes x output
    types), ``differs_from_ocp`` (engine vs the spec: RNE, the engine's
    saturation) and its split by kind ``ocp_nan``, ``ocp_saturation``,
    ``ocp_rounding``, ``ocp_zero/sign``, ``ocp_e8m0`` (kinds as in
    :func:`fp8emu.conformance.report`).

    Parameters
    ----------
    engines : iterable of str, optional
        Engines to run (default: every installed one).
    n_random : int
        Random bit patterns added per float32/float64 source.
    progress : callable, optional
        Called with a one-line description before each engine/format.

    Examples
    --------
    >>> from fp8emu.engines import live_report, installed_engines
    >>> rows = live_report(["jax-cpu"], n_random=0) if "jax-cpu" in installed_engines() else []
    >>> all(r["mismatches"] == 0 for r in rows)
    True
    """
    have = installed_engines()
    names = list(have) if engines is None else list(engines)
    for e in names:
        if e not in ENGINES:
            raise ValueError(f"unknown engine {e!r}; valid: {', '.join(ENGINES)}")
        if e not in have:
            raise ValueError(f"engine {e!r} is not installed (needs {', '.join(ENGINES[e])})")
    probes = {}
    rows = []
    for engine in names:
        version = ", ".join(f"{d} {v}" for d, v in have[engine].items())
        proven = _proven(engine, have[engine])
        for fmt in ENGINE_FORMATS[engine]:
            if progress is not None:
                progress(f"{engine} {fmt}")
            f = get_format(fmt)
            codes = np.arange(1 << f.bits, dtype=np.uint8)
            dec_mm = 0
            for src in ENGINE_SOURCES[engine]:
                dt = SOURCE_DTYPES[src]
                uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
                got = engine_decode(engine, codes, fmt, dt)
                exp = decode(codes, fmt, dtype=dt, profile=engine_profile(engine, fmt)[0])
                dec_mm += int(np.count_nonzero(got.view(uint) != exp.view(uint)))
            for opt in engine_options(engine, fmt):
                prof, rnd = engine_profile(engine, fmt, **opt)
                sat = bool(opt.get("saturate", False))
                row = dict(engine=engine, version=version, proven=proven, format=fmt,
                           setting=_setting_text(opt), profile=prof + (f" ({rnd})" if rnd != "rne" else ""),
                           inputs=0, mismatches=0, decode_mismatches=dec_mm, differs_from_ocp=0,
                           **{f"ocp_{k}": 0 for k in KINDS})
                for src in ENGINE_SOURCES[engine]:
                    if src not in probes:
                        probes[src] = probe_inputs(src, n_random)
                    x = probes[src]
                    got = engine_cast(engine, x, fmt, **opt)
                    with np.errstate(over="ignore", invalid="ignore"):
                        exp = encode(x, fmt, profile=prof, rounding=rnd)
                        ocp = encode(x, fmt, rounding=opt.get("rounding", "rne"), saturate=sat)
                    d = got != ocp
                    kinds = classify_differences(f, x[d], got[d], ocp[d])
                    row["inputs"] += x.size
                    row["mismatches"] += int(np.count_nonzero(got != exp))
                    row["differs_from_ocp"] += int(np.count_nonzero(d))
                    for k in KINDS:
                        row[f"ocp_{k}"] += int(np.count_nonzero(kinds == k))
                rows.append(row)
    return rows


def live_markdown(rows) -> str:
    """The live report as a Markdown table.

    Examples
    --------
    >>> from fp8emu.engines import live_markdown
    >>> live_markdown([]).splitlines()[0].startswith("| engine | version")
    True
    """
    head = ["engine", "version", "format", "setting", "profile", "inputs", "mismatches", "decode mm",
            "≠ ocp", "NaN code", "saturation", "rounding", "zero/sign", "e8m0 rule"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ver = r["version"] + ("" if r["proven"] else " (not a proven version)")
        lines.append("| " + " | ".join([r["engine"], ver, r["format"], r["setting"], r["profile"],
                                        str(r["inputs"]), str(r["mismatches"]), str(r["decode_mismatches"]),
                                        str(r["differs_from_ocp"])]
                                       + [str(r[f"ocp_{k}"]) for k in KINDS]) + " |")
    return "\n".join(lines)
