"""Random MMA test cases for the instruction catalogue, regenerable bit for bit from (preset, seed).

Shared by tools/record_mmasim.py (which runs MMA-Sim on them) and tests/test_instructions.py
(which replays them through fp8emu).  Inputs come from a splitmix64 stream written here in
NumPy, so they do not depend on NumPy's Generator algorithms, and from nothing in fp8emu:
element codes are built from each format's bit fields.

Each case is one dot product ``d = a . b + c`` of the instruction's K, in one of eight styles:
uniform codes (Inf/NaN included where the format has them), finite codes, a narrow exponent
window with mixed signs (cancellation), subnormal-heavy, half zeros, one large term among
tiny ones, exactly cancelling pairs, and (nearly) vanishing products; C is sometimes set
against the products' sum.  C is zero, tiny
(float32 subnormal), product-sized, huge or (rarely) Inf/NaN.  Block scales are random over
their whole range, near 1, or extreme; now and then NaN.
"""

from __future__ import annotations

import zlib

import numpy as np

#: (exponent bits, mantissa bits, has Inf, NaN codes rule) of each element format, by fp8emu name.
LAYOUT = {"e4m3fn": (4, 3), "e5m2": (5, 2), "e3m2fn": (3, 2), "e2m3fn": (2, 3), "e2m1fn": (2, 1),
          "e4m3fnuz": (4, 3), "e5m2fnuz": (5, 2),
          # 16-bit inputs: IEEE-style bit patterns (uint16); tf32 as a float32 word (uint32, low 13 bits 0)
          "float16": (5, 10), "bfloat16": (8, 7), "tf32": (8, 10)}
WIDE = ("float16", "bfloat16", "tf32")

#: Which MMA-Sim instruction each preset is recorded from, the operand-format pairs and scale kinds.
FP8 = ("e4m3fn", "e5m2")
F8F6F4 = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")
NVFP4_KINDS = (("ue8m0", 32), ("ue8m0", 16), ("ue4m3", 16))


def pairs(formats):
    return [(x, y) for x in formats for y in formats]


PRESET_CASES = {
    "ada-mma": dict(k=32, pairs=pairs(FP8), out="float32"),
    "ada-mma-f16": dict(k=32, pairs=pairs(FP8), out="float16"),
    "hopper-wgmma": dict(k=32, pairs=pairs(FP8), out="float32"),
    "hopper-wgmma-f16": dict(k=32, pairs=pairs(FP8), out="float16"),
    "blackwell-tcgen05-f8f6f4": dict(k=32, pairs=pairs(F8F6F4), out="float32"),
    "blackwell-tcgen05-f8f6f4-f16": dict(k=32, pairs=pairs(F8F6F4), out="float16"),
    "blackwell-tcgen05-mxf8f6f4": dict(k=32, pairs=pairs(F8F6F4), out="float32", scales=(("ue8m0", 32),)),
    "blackwell-tcgen05-mxf4nvf4": dict(k=64, pairs=[("e2m1fn", "e2m1fn")], out="float32", scales=NVFP4_KINDS),
    "rtx-blackwell-mma": dict(k=32, pairs=pairs(F8F6F4), out="float32"),
    "rtx-blackwell-mma-f16": dict(k=32, pairs=pairs(F8F6F4), out="float16"),
    "rtx-blackwell-mma-mxf8f6f4": dict(k=32, pairs=pairs(F8F6F4), out="float32", scales=(("ue8m0", 32),)),
    "rtx-blackwell-mma-mxf4nvf4": dict(k=64, pairs=[("e2m1fn", "e2m1fn")], out="float32", scales=NVFP4_KINDS),
    "cdna3-mfma-fp8": dict(k=32, pairs=pairs(("e4m3fnuz", "e5m2fnuz")), out="float32"),
}
#: The 16-bit-input mma.sync presets: (generation, K per type).
_SIXTEEN = {"volta": {"float16": 4}, "ampere": {"float16": 8, "bfloat16": 8, "tf32": 4},
            "ada": {"float16": 8, "bfloat16": 8, "tf32": 4}, "hopper": {"float16": 16, "bfloat16": 16, "tf32": 4},
            "blackwell": {"float16": 16, "bfloat16": 16, "tf32": 4}}
_SHORT = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}
for _gen, _kinds in _SIXTEEN.items():
    for _f, _k in _kinds.items():
        PRESET_CASES[f"{_gen}-mma-{_SHORT[_f]}in"] = dict(k=_k, pairs=[(_f, _f)], out="float32")
        if _f == "float16":
            PRESET_CASES[f"{_gen}-mma-f16in-f16"] = dict(k=_k, pairs=[(_f, _f)], out="float16")


class Stream:
    """splitmix64: a counter-based stream of uint64 words (same words on every platform)."""

    def __init__(self, seed):
        with np.errstate(over="ignore"):
            self.state = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
        self.count = np.uint64(0)

    def words(self, shape):
        n = int(np.prod(shape))
        with np.errstate(over="ignore"):
            z = self.state + (self.count + np.arange(1, n + 1, dtype=np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
            self.count += np.uint64(n)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        return z.reshape(shape)

    def ints(self, shape, lo, hi):
        """Integers in [lo, hi) (hi - lo a small number: the modulo bias is negligible here)."""
        return (lo + (self.words(shape) % np.uint64(hi - lo)).astype(np.int64)).astype(np.int64)


def _codes(st, fmt, shape, style):
    """Element codes of ``fmt`` (one per byte) for cases of the given per-row styles (n,)."""
    eb, mb = LAYOUT[fmt]
    bits = 1 + eb + mb
    n, K = shape
    emax = (1 << eb) - 1
    sign = st.ints(shape, 0, 2)
    mant = st.ints(shape, 0, 1 << mb)
    expo = st.ints(shape, 0, emax + 1)
    s = style[:, None]
    # narrow window (cancellation): exponents within 2 of a per-row centre
    centre = st.ints((n, 1), 0, emax + 1)
    win = np.clip(centre + st.ints(shape, -1, 2), 0, emax)
    expo = np.where(s == 2, win, expo)
    expo = np.where(s == 3, st.ints(shape, 0, 2), expo)                 # subnormal-heavy
    big = st.ints((n, 1), 0, K)
    tiny = st.ints(shape, 0, max(1, emax // 3 + 1))
    expo = np.where((s == 5) & (np.arange(K)[None, :] != big), tiny, expo)
    expo = np.where((s == 5) & (np.arange(K)[None, :] == big), np.maximum(emax - 1, 0), expo)
    code = (sign << (bits - 1)) | (expo << mb) | mant
    if fmt.endswith("fnuz"):
        nan_code = 1 << (bits - 1)
        finite = lambda c: np.where(c == nan_code, 0, c)                  # noqa: E731
    elif fmt in WIDE:
        finite = lambda c: np.where(((c >> mb) & emax) == emax, c & ~(emax << mb), c)   # noqa: E731
    elif fmt == "e5m2":
        finite = lambda c: np.where((c & 0x7C) == 0x7C, c & 0x83, c)     # noqa: E731
    elif fmt == "e4m3fn":
        finite = lambda c: np.where((c & 0x7F) == 0x7F, c & 0xF8, c)     # noqa: E731
    else:
        finite = lambda c: c                                              # noqa: E731
    code = np.where(s == 0, code, finite(code))
    zero = st.ints(shape, 0, 2) == 0
    # signed zeros (FNUZ formats have one zero: their sign-only code is NaN)
    zero_code = 0 if fmt.endswith("fnuz") else code & (1 << (bits - 1))
    code = np.where((s == 4) & zero, zero_code, code)
    # products that vanish (so C decides, down to float32's subnormals): all zeros in half the
    # rows of this style, a single non-zero element in the others
    keep = (st.ints((n, 1), 0, 2) == 0) & (np.arange(K)[None, :] == 0)
    zero_code = 0 if fmt.endswith("fnuz") else code & (1 << (bits - 1))
    code = np.where((s == 7) & ~keep, zero_code, code)
    if style.size and (s == 6).any():
        # exactly cancelling pairs: element 2j+1 repeats element 2j with the sign flipped
        half = code[:, 0::2]
        flip = half ^ (1 << (bits - 1))
        pairc = np.empty_like(code)
        pairc[:, 0::2], pairc[:, 1::2] = half, flip
        code = np.where(s == 6, pairc, code)
    if fmt == "tf32":
        return (code.astype(np.uint32) << np.uint32(13)).astype(np.uint32)
    return code.astype(np.uint16 if fmt in WIDE else np.uint8)


def _c_values(st, out, n, approx):
    """Accumulator inputs (float32 or float16 values as float64) for n cases."""
    dt = np.float32 if out == "float32" else np.float16
    mode = st.ints((n,), 0, 8)
    m = st.ints((n,), 0, 1 << 20).astype(np.float64) / (1 << 20) + 1.0
    sgn = np.where(st.ints((n,), 0, 2) == 1, -1.0, 1.0)
    lo, hi = (-149, 127) if out == "float32" else (-24, 15)
    e_any = st.ints((n,), lo, hi + 1)
    e_mid = st.ints((n,), -12, 12)
    c = np.zeros(n)
    c = np.where(mode == 1, sgn * np.ldexp(m, e_any), c)
    c = np.where(mode == 2, sgn * np.ldexp(m, e_mid), c)
    c = np.where(mode == 3, sgn * np.ldexp(1.0, st.ints((n,), lo, lo + 10)), c)       # tiny
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.where(mode == 4, -approx, c)                                               # cancellation
        c = np.where(mode == 5, sgn * np.ldexp(m, st.ints((n,), hi - 6, hi + 1)), c)    # huge
        special = np.array([np.inf, -np.inf, np.nan, 0.0])[st.ints((n,), 0, 4)]
        c = np.where((mode == 6) & (st.ints((n,), 0, 16) == 0), special, c)
        c = np.where(mode == 7, -0.0, c)
        c = c.astype(dt)
    return c


def _scales(st, kind, shape, style):
    s = style[:, None]
    if kind == "ue8m0":
        code = st.ints(shape, 0, 255)
        code = np.where(s % 3 == 1, st.ints(shape, 120, 135), code)       # near 1
        code = np.where(s % 3 == 2, np.where(st.ints(shape, 0, 2) == 0, st.ints(shape, 0, 4),
                                             st.ints(shape, 251, 255)), code)   # extreme
        code = np.where(st.ints(shape, 0, 64) == 0, 255, code)            # NaN scale now and then
    else:
        code = st.ints(shape, 0, 127)
        code = np.where(s % 3 == 1, st.ints(shape, 48, 72), code)
        code = np.where(s % 3 == 2, np.where(st.ints(shape, 0, 2) == 0, st.ints(shape, 0, 8),
                                             st.ints(shape, 118, 127)), code)
        code = np.where(st.ints(shape, 0, 64) == 0, 127, code)            # NaN (0x7f)
        code = code | (st.ints(shape, 0, 2) << 7)                         # sign bit: ignored by ue4m3
    return code.astype(np.uint8)


def _approx_values(code, fmt):
    """Plain float64 values of codes (for C-cancellation cases only; NaN/Inf -> 0)."""
    eb, mb = LAYOUT[fmt]
    bits = 1 + eb + mb
    bias = (1 << (eb - 1)) - (0 if fmt.endswith("fnuz") else 1)
    c = code.astype(np.int64) >> (13 if fmt == "tf32" else 0)
    sign = np.where((c >> (bits - 1)) & 1, -1.0, 1.0)
    e = (c >> mb) & ((1 << eb) - 1)
    m = c & ((1 << mb) - 1)
    v = np.where(e == 0, np.ldexp(m.astype(float), 1 - bias - mb),
                 np.ldexp((m + (1 << mb)).astype(float), e - bias - mb))
    return sign * v


def cases(preset, seed, n):
    """The ``n`` cases of ``preset`` for ``seed``: a list of groups, one per (format pair, scale kind).

    Each group is a dict: ``a_format``, ``b_format``, ``a``, ``b`` (n_g, K) uint8 codes, ``c``
    (n_g,) float32/float16, and for block-scaled presets ``scale_format``, ``block``,
    ``a_scales``, ``b_scales`` (n_g, K // block) uint8.
    """
    spec = PRESET_CASES[preset]
    K = spec["k"]
    kinds = spec.get("scales", (None,))
    groups = [(pa, pb, kd) for pa, pb in spec["pairs"] for kd in kinds]
    # each preset draws its own cases (presets sharing a datapath are not tested on the same inputs)
    st = Stream(int(seed) ^ zlib.crc32(preset.encode()))
    out = []
    for gi, (fa, fb, kd) in enumerate(groups):
        ng = n // len(groups) + (1 if gi < n % len(groups) else 0)
        style = st.ints((ng,), 0, 8)
        a = _codes(st, fa, (ng, K), style)
        b = _codes(st, fb, (ng, K), style)
        approx = (_approx_values(a, fa) * _approx_values(b, fb)).sum(axis=1)
        g = dict(a_format=fa, b_format=fb, a=a, b=b)
        if kd is not None:
            kind, block = kd
            g.update(scale_format=kind, block=block, a_scales=_scales(st, kind, (ng, K // block), style),
                     b_scales=_scales(st, kind, (ng, K // block), style))
            approx = approx * 0          # with scales, cancellation against C is left to chance
        g["c"] = _c_values(st, spec["out"], ng, approx)
        out.append(g)
    return out
