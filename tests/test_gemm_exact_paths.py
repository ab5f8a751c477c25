"""The wide route's exact fast path against its dense per-product step.

The wide route (``routes.wide.run_wide``) runs the rows of unbounded exponents: the steps of
``block_scaled_mm``'s tensor-core models among them (tests/test_gemm_routes.py holds it to the
reference steps).

The fast path (``wide._mma_piece_fast``) sums a tensor-core step with one float64 matrix
product where per-step exponent bounds prove the alignment cuts nothing, and sends the other
entries through a per-entry copy of the dense step.  Here every result is compared bit for bit
with the dense step (``wide._PATH = "dense"``), with the choice left to the route and forced
down each route: all entries fast wherever the checks allow, and all entries through the
fallback.  The B200 recordings are run down every route too; one adversarial case per check
fails with that check removed; counters show the fast path is really taken.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import GemmModel, Policy, block_scaled_mm, code_tables, models, step_row
from fp8emu.gemm.routes import wide

import test_tc_recordings

ROUTES = ["fast", "fallback", None]


def _bits(x):
    return np.asarray(x).view(np.uint32 if np.asarray(x).dtype == np.float32 else np.uint16)


def _on_route(monkeypatch, route, fn):
    monkeypatch.setattr(wide, "_PATH", route)
    wide.COUNTERS.update(dict.fromkeys(wide.COUNTERS, 0))
    out = fn()
    return out, dict(wide.COUNTERS)


def assert_routes_agree(monkeypatch, fn, routes=ROUTES):
    """fn() on every route is bit-identical to fn() on the dense step; returns the counters."""
    ref, cnt = _on_route(monkeypatch, "dense", fn)
    assert cnt["fast"] == cnt["fallback"] == 0
    counts = {}
    for route in routes:
        got, counts[route] = _on_route(monkeypatch, route, fn)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        bad = np.flatnonzero(_bits(got) != _bits(ref))
        assert bad.size == 0, f"route {route}: {bad.size} entries differ, first at {bad[:5]}"
        if route == "fallback":
            assert counts[route]["fast"] == 0
    return counts


# ----------------------------------------------------------------------------- recordings
@pytest.mark.parametrize("route", ["fast", "fallback"])
@pytest.mark.parametrize("fmt", sorted(test_tc_recordings.FORMATS))
def test_tc_recordings_on_every_route(monkeypatch, route, fmt):
    monkeypatch.setattr(wide, "_PATH", route)
    test_tc_recordings.test_blackwell_preset_matches_b200_recordings(fmt)
    if fmt == "e5m2":
        got, d = test_tc_recordings._b200(fmt, _model(32, 30, 24, "rne"))
        assert test_tc_recordings.mismatches(got, d) == [3935, 4630]


# ----------------------------------------------------------------------------- random data
MX_FORMATS = ["e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn", "int8"]
PAIRS = [(f, f) for f in MX_FORMATS] + [("e4m3fn", "e5m2"), ("e5m2", "e2m1fn"), ("e2m3fn", "int8"),
                                        ("e2m1fn", "e4m3fn"), ("nvfp4", "nvfp4"), ("nvfp4", "e4m3fn")]
DISTS = ["gauss", "codes", "logu", "subnormal"]


def _data(rng, shape, dist):
    if dist == "gauss":
        return rng.standard_normal(shape)
    if dist == "logu":
        return rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(-40, 40, shape))
    if dist == "subnormal":
        return rng.standard_normal(shape) * np.exp2(rng.integers(-12, 1, shape))
    raise AssertionError(dist)


def _operand(rng, fmt, shape, dist, axis):
    """A block-scaled operand: a ScaledTensor, or (codes, format, scale codes) for raw codes."""
    if dist == "codes" and fmt != "nvfp4":
        f = fp8emu.get_format(fmt) if fmt != "int8" else None
        tmpl = fp8emu.quantize_mx(np.ones(shape), fmt, axis=axis)
        if f is not None:
            vals = f.values()
            ok = np.flatnonzero(np.isfinite(vals)).astype(np.uint8)
            codes = rng.choice(ok, size=shape).astype(np.uint8)
        else:
            codes = rng.integers(0, 256, shape).astype(np.uint8)
        scales = rng.integers(110, 145, tmpl.scale_codes.shape).astype(np.uint8)
        return dict(codes=codes, fmt=fmt, scales=scales)
    x = _data(rng, shape, "gauss" if dist == "codes" else dist)
    if fmt == "nvfp4":
        return fp8emu.quantize_nvfp4(x, axis=axis)
    return fp8emu.quantize_mx(x, fmt, axis=axis)


def _bsmm(A, B, **kw):
    args, opts = [], {}
    for op, name in ((A, "a"), (B, "b")):
        if isinstance(op, dict):
            args.append(op["codes"])
            opts[f"{name}_format"], opts[f"{name}_scales"] = op["fmt"], op["scales"]
        else:
            args.append(op)
    return lambda: block_scaled_mm(*args, **opts, **kw)


def _model(group, frac_bits, sum_bits, sum_rounding, scale_at="product"):
    """A block-scaled model of these step widths: a catalogue row and where the scales apply."""
    return GemmModel("widths", "instruction", step_row(group, frac_bits, sum_bits, sum_rounding), Policy(scale_at=scale_at))


ACCS = [BLACKWELL := "blackwell", _model(32, 25, 24, "rtz"),
        _model(16, 40, 30, "rne"), _model(32, 31, 24, "rne", "block")]


@pytest.mark.parametrize("fa,fb", PAIRS)
@pytest.mark.parametrize("dist", DISTS)
def test_block_scaled_routes_agree(monkeypatch, fa, fb, dist):
    rng = np.random.default_rng(abs(hash((fa, fb, dist))) % 2**32)
    M, N, K = 21, 13, 160
    if (fa == "nvfp4") != (fb == "nvfp4") and dist == "codes":
        dist = "gauss"
    A, B = _operand(rng, fa, (M, K), dist, 1), _operand(rng, fb, (K, N), dist, 0)
    accs = ACCS if dist == "gauss" else ACCS[:2]
    if "nvfp4" in (fa, fb):
        accs = [x for x in accs if getattr(getattr(x, "policy", None), "scale_at", "") != "block"]   # 16-wide blocks
    for acc in accs:
        assert_routes_agree(monkeypatch, _bsmm(A, B, accumulator=acc))


@pytest.mark.parametrize("chunk", ["one step", "three steps"])
def test_fast_path_in_chunks_of_steps(monkeypatch, chunk):
    """The fast path's batched matrix products cover a few steps at a time (``_STEP_CHUNK`` step sums,
    here one step or three, with a remainder): each chunk boundary gives the dense step's bits, for
    the block-scaled and the plain presets, with tiny elements and a zero step so that some entries
    take the per-entry step."""
    rng = np.random.default_rng(11)
    M, N, K = 24, 20, 32 * 11
    per_step = M * N if chunk == "one step" else 3 * M * N
    monkeypatch.setattr(wide, "_STEP_CHUNK", per_step)
    x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    x[rng.random((M, K)) < 0.02] *= 2.0 ** -9
    x[4, 64:96] = 0.0
    a, b = fp8emu.quantize_mx(x, "e4m3fn"), fp8emu.quantize_mx(y, "e4m3fn", axis=0)
    for acc in ACCS:
        counts = assert_routes_agree(monkeypatch, _bsmm(a, b, accumulator=acc))
        assert counts[None]["fast"] > 0, acc


def test_block_scaled_special_cases(monkeypatch):
    rng = np.random.default_rng(7)
    M, N, K = 12, 10, 96 + 32
    x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    x[3], y[:, 4] = 0.0, 0.0                       # a zero row and a zero column
    x[5, 40:72] = 0.0                              # a zero step inside a row
    a, b = fp8emu.quantize_mx(x, "e4m3fn"), fp8emu.quantize_mx(y, "e4m3fn", axis=0)
    for acc in ACCS:
        assert_routes_agree(monkeypatch, _bsmm(a, b, accumulator=acc))
    # NaN / Inf element codes and a NaN scale
    ca, cb = a.codes.copy(), b.codes.copy()
    ca[1, 7], cb[9, 2] = 0x7F, 0x7F
    sa = a.scale_codes.copy()
    sa[2, 1] = 255
    A = dict(codes=ca, fmt="e4m3fn", scales=sa)
    B = dict(codes=cb, fmt="e4m3fn", scales=b.scale_codes)
    assert_routes_agree(monkeypatch, _bsmm(A, B))
    ca5 = fp8emu.encode(x, "e5m2")
    ca5[0, 0] = fp8emu.encode(np.array([np.inf]), "e5m2")[0]      # an Inf element
    A5 = dict(codes=ca5, fmt="e5m2", scales=a.scale_codes)
    assert_routes_agree(monkeypatch, _bsmm(A5, B))
    # extreme E8M0 scales: 2**-127 and 2**127 side by side, and a whole range
    for lo, hi in ((0, 3), (251, 255), (0, 255)):
        sa = rng.integers(lo, hi, a.scale_codes.shape).astype(np.uint8)
        sb = rng.integers(lo, hi, b.scale_codes.shape).astype(np.uint8)
        A = dict(codes=a.codes, fmt="e4m3fn", scales=sa)
        B = dict(codes=b.codes, fmt="e4m3fn", scales=sb)
        with np.errstate(over="ignore", invalid="ignore"):
            assert_routes_agree(monkeypatch, _bsmm(A, B))


@pytest.mark.parametrize("K", [32, 45, 100, 1000])
def test_block_scaled_c_input_and_ragged_k(monkeypatch, K):
    rng = np.random.default_rng(K)
    M, N = 9, 11
    a = fp8emu.quantize_mx(rng.standard_normal((M, K)), "e4m3fn")
    b = fp8emu.quantize_mx(rng.standard_normal((K, N)), "e5m2", axis=0)
    c = (rng.standard_normal((M, N)) * np.exp2(rng.integers(-40, 20, (M, N)))).astype(np.float32)
    c[0, :3] = 0.0
    c[2, 0] = np.float32(3e38)                     # the sum overflows float32 (but not float64) on the way
    for acc in ACCS[:3]:
        with np.errstate(over="ignore"):
            counts = assert_routes_agree(monkeypatch, _bsmm(a, b, accumulator=acc, c=c))
        assert counts["fast"]["fast"] > 0
    c[1, 0] = np.float32(1e-42)                   # a float32 subnormal C: the fast path declines
    assert_routes_agree(monkeypatch, _bsmm(a, b, c=c))
    c = np.zeros((M, N), np.float32)
    c[0, 0] = -0.0                                 # a negative zero C keeps its sign through zero products
    a0 = fp8emu.quantize_mx(np.zeros((M, K)), "e4m3fn")
    assert_routes_agree(monkeypatch, _bsmm(a0, b, c=c))
    assert_routes_agree(monkeypatch, _bsmm(a, b, c=c))


def _codes(rng, fmt, shape, dist):
    f = fp8emu.get_format(fmt)
    if dist == "codes":
        ok = np.flatnonzero(np.isfinite(f.values())).astype(np.uint8)
        return rng.choice(ok, size=shape).astype(np.uint8)
    with np.errstate(over="ignore"):
        return fp8emu.encode(_data(rng, shape, dist), fmt, saturate=True)


# ----------------------------------------------------------------------------- each check guards a case
def _ones(n):
    return np.full((n, 1), 127, np.uint8)


def _one_row_mm(a_vals, b_vals, acc="blackwell", c=None):
    """A 1 x 1 block-scaled product of e4m3fn values with unit scales (K a multiple of 32)."""
    ca = fp8emu.encode(np.asarray(a_vals, float)[None, :], "e4m3fn")
    cb = fp8emu.encode(np.asarray(b_vals, float)[:, None], "e4m3fn")
    K = ca.shape[1]
    sa = np.full((1, K // 32), 127, np.uint8)
    return lambda: block_scaled_mm(ca, cb, a_format="e4m3fn", b_format="e4m3fn", a_scales=sa,
                                   b_scales=sa.T, accumulator=acc, c=c)


Z30 = [0.0] * 30
ADVERSARIAL = {
    # a step spanning more than F = 31 binades: 448*448 - 448*448 + 2**-18; the alignment to
    # 2**(16 - 31) cuts the small product, so the GPU returns 0 where the exact sum is 2**-18
    "span": _one_row_mm([448.0, 448.0, 2.0 ** -9] + [0.0] * 29, [448.0, -448.0, 2.0 ** -9] + [0.0] * 29),
    # a tiny partial (3 * 2**-18) followed by a much larger group that cancels: the partial is cut
    "small_part": _one_row_mm([2.0 ** -9] * 2 + Z30 + [448.0, 448.0] + Z30,
                              [2.0 ** -9, 2.0 ** -8] + Z30 + [448.0, -448.0] + Z30),
    # a large partial (32 * 448**2, ulp 2**-1) followed by products just above half its ulp:
    # the partial sets E, 2**-11 is cut, and the rest, 2**-2, is a tie that rounds to even
    "large_part": _one_row_mm([448.0] * 32 + [0.5, 2.0 ** -6] + Z30, [448.0] * 32 + [0.5, 2.0 ** -5] + Z30),
}


@pytest.mark.parametrize("check", sorted(ADVERSARIAL))
def test_each_check_guards_a_case(monkeypatch, check):
    fn = ADVERSARIAL[check]
    ref, _ = _on_route(monkeypatch, "dense", fn)
    got, cnt = _on_route(monkeypatch, "fast", fn)
    assert np.array_equal(_bits(got), _bits(ref))
    assert cnt["fallback"] > 0, "the check must send this case to the per-entry step"
    monkeypatch.setattr(wide, "_CHECKS", wide._CHECKS - {check})
    got, cnt = _on_route(monkeypatch, "fast", fn)
    assert not np.array_equal(_bits(got), _bits(ref)), f"without {check!r} the fast path is wrong here"
    assert cnt["fallback"] == 0


# ----------------------------------------------------------------------------- the fast path is taken
def test_counters_show_the_fast_path_on_gaussian_mx(monkeypatch):
    rng = np.random.default_rng(11)
    a = fp8emu.quantize_mx(rng.standard_normal((64, 1024)), "e4m3fn")
    b = fp8emu.quantize_mx(rng.standard_normal((1024, 48)), "e4m3fn", axis=0)
    counts = assert_routes_agree(monkeypatch, _bsmm(a, b), routes=[None])[None]
    steps = 64 * 48 * (1024 // 32)
    assert counts["dense"] == 0
    assert counts["fast"] + counts["fallback"] == steps
    assert counts["fast"] >= 0.95 * steps
    # MXFP4 and NVFP4 (narrower elements) take it too
    for x, y in ((fp8emu.quantize_mx(rng.standard_normal((32, 512)), "e2m1fn"),
                  fp8emu.quantize_mx(rng.standard_normal((512, 32)), "e2m1fn", axis=0)),
                 (fp8emu.quantize_nvfp4(rng.standard_normal((32, 512))),
                  fp8emu.quantize_nvfp4(rng.standard_normal((512, 32)), axis=0))):
        wide.COUNTERS.update(dict.fromkeys(wide.COUNTERS, 0))
        block_scaled_mm(x, y)
        assert wide.COUNTERS["fast"] >= 0.95 * 32 * 32 * 16


def test_choice_falls_back_to_dense_for_narrow_alignment(monkeypatch):
    # 12 fraction bits fail the span check for most entries: the route keeps the dense step
    rng = np.random.default_rng(2)
    a, b = _codes(rng, "e4m3fn", (64, 256), "gauss"), _codes(rng, "e4m3fn", (256, 64), "gauss")
    monkeypatch.setattr(wide, "_PATH", None)
    wide.COUNTERS.update(dict.fromkeys(wide.COUNTERS, 0))
    narrow = models.wide_row(step_row(32, 12, 13, "rtz", name="narrow"))
    f = fp8emu.get_format("e4m3fn")
    wide.run_wide(narrow, *code_tables.values_and_exponents(a, f), *code_tables.values_and_exponents(b, f))
    assert wide.COUNTERS["dense"] == 64 * 64 * 8 and wide.COUNTERS["fast"] == 0


@pytest.mark.parametrize("fmt", ["e4m3fn", "e2m1fn", "int8", "nvfp4"])
@pytest.mark.parametrize("K", [64, 70])
def test_block_front_end_matches_per_element_form(fmt, K):
    # the (row, block) front end of scale_at="product" gives the per-element reference's arrays
    from fp8emu.gemm import block_scaled as bs
    rng = np.random.default_rng(K)
    x = rng.standard_normal((6, K)) * np.exp2(rng.integers(-20, 20, (6, 1)))
    x[1] = 0.0
    x[2, :5] = 0.0
    t = fp8emu.quantize_nvfp4(x) if fmt == "nvfp4" else fp8emu.quantize_mx(x, fmt)
    op = bs._operand(t, None, None, None, 1, "a")
    if fmt != "nvfp4":
        op = op._replace(scales=np.where(np.arange(op.scales.size).reshape(op.scales.shape) == 3,
                                         np.nan, op.scales))          # a NaN scale
    p, e2, l2 = wide.scaled_operand(op.codes, op.fmt, np.where(np.isnan(op.scales), 0.0, op.scales), op.block)
    va, ea = code_tables.values_and_exponents(op.codes, op.fmt)
    sa = np.repeat(op.scales, op.block, axis=1)[:, :K]
    sa = np.where(np.isnan(sa), 0.0, sa)
    _, qa = np.frexp(sa)
    pa = va * sa
    ea2 = np.where(pa == 0, code_tables.ZERO_EXP, ea + np.where(sa == 0, 0, qa - 1)).astype(np.int16)
    np.testing.assert_array_equal(p, pa)
    np.testing.assert_array_equal(e2, ea2)
    np.testing.assert_array_equal(l2, code_tables.low_bits(pa))
    # low_bits itself: v / 2**low is an odd integer
    nz = pa != 0
    q = pa[nz] / np.exp2(l2[nz].astype(float))
    assert np.all(q == np.round(q)) and np.all(np.abs(q) % 2 == 1)


def test_routes_agree_on_two_threads(monkeypatch):
    # row blocks on two threads (each with its own buffers; the counters under a lock)
    rng = np.random.default_rng(21)
    a = fp8emu.quantize_mx(rng.standard_normal((96, 512)), "e4m3fn")
    b = fp8emu.quantize_mx(rng.standard_normal((512, 40)), "e5m2", axis=0)
    before = fp8emu.get_threads()
    fp8emu.set_threads(2)
    try:
        counts = assert_routes_agree(monkeypatch, _bsmm(a, b))
    finally:
        fp8emu.set_threads(before)
    assert counts[None]["fast"] + counts[None]["fallback"] == 96 * 40 * 16


@pytest.mark.parametrize("shape", [(0, 3, 64), (3, 0, 64), (3, 3, 0)])
def test_empty_products(monkeypatch, shape):
    M, N, K = shape
    a = fp8emu.quantize_mx(np.ones((M, K)), "e4m3fn")
    b = fp8emu.quantize_mx(np.ones((K, N)), "e4m3fn", axis=0)
    for acc in ("blackwell", "exact", "fp32"):
        assert_routes_agree(monkeypatch, _bsmm(a, b, accumulator=acc))
        out = _bsmm(a, b, accumulator=acc)()
        assert out.shape == (M, N) and out.dtype == np.float32 and not out.any()
