"""The matrix-instruction catalogue against MMA-Sim's outputs and public GPU recordings.

Expected values are data fp8emu did not produce: MMA-Sim 2.1.1's outputs on the random cases of
tests/mmasim_cases.py (recorded by tools/record_mmasim.py: the first outputs in full, every
output through SHA-256 digests of chunks), and the GPU results of MATLAB-tensor-core's
``model_validation`` recordings (tests/data/tc_recordings).  No torch is needed; the live
differential test runs only where ``mmasim`` imports.
"""

import functools
import hashlib
import importlib.util
import json
import os
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import datapaths, instructions as ins_mod, routes
from fp8emu.gemm.routes import codes as codes_mod, exact as exact_mod, groups as groups_mod, operands as operands_mod
from fp8emu.gemm.routes import tables as tables_mod
from fp8emu.gemm.catalogue import EVIDENCE, INSTRUCTIONS, Instruction, get_instruction, presets
from fp8emu.gemm.instructions import dot, mma

import mmasim_cases

DATA = Path(__file__).parent / "data"
MMASIM = DATA / "mmasim"
REC = DATA / "tc_recordings"
FMT = {"e4m3": "e4m3fn", "e5m2": "e5m2"}


def fp8emu_bits(preset, groups, route="rows"):
    """fp8emu's output bits on the cases: as row-wise dot products (``"rows"``: code-pair tables for
    FP8/FP6/FP4), or (``"tiles"``) as a batch of 1 x 1 tiles through :func:`mma` (the operand path of
    the fused datapath)."""
    outs = []
    for g in groups:
        kw = dict(instruction=preset, a_format=g["a_format"], b_format=g["b_format"], a_scales=g.get("a_scales"),
                  b_scales=g.get("b_scales"), scale_format=g.get("scale_format"))
        if route == "rows":
            outs.append(dot(g["a"], g["b"], g["c"], **kw))
        else:
            sc = {} if "a_scales" not in g else dict(a_scales=g["a_scales"][:, None, :],
                                                      b_scales=g["b_scales"][:, :, None])
            outs.append(mma(g["a"][:, None, :], g["b"][:, :, None], g["c"][:, None, None], **{**kw, **sc})[:, 0, 0])
    d = np.concatenate(outs)
    return d.view(np.uint32 if d.dtype == np.float32 else np.uint16)


# ----------------------------------------------------------------------------- recorded MMA-Sim vectors
RECORDED = sorted(p.stem for p in MMASIM.glob("*.npz"))


def test_every_mmasim_modelled_preset_has_recorded_vectors():
    assert set(RECORDED) == set(mmasim_cases.PRESET_CASES)


# the fused FP8/FP6/FP4 presets also replay as tiles, which takes them through the operand path, and
# the grouped (FP4) ones, through group sums as matrix products
ROUTES = [(p, r) for p in RECORDED for r in ("rows", "tiles")
          if r == "rows" or INSTRUCTIONS[p].formats[0] not in ("float16", "bfloat16", "tf32")]


@functools.lru_cache(maxsize=1)        # a preset's two routes run one after the other
def _recorded_cases(preset, seed, n):
    return mmasim_cases.cases(preset, seed, n)


@pytest.mark.parametrize("preset,route", ROUTES)
def test_preset_equals_mmasim_on_recorded_random_mmas(preset, route):
    z = np.load(MMASIM / f"{preset}.npz")
    n, seed, chunk = int(z["n"]), int(z["seed"]), int(z["chunk"])
    assert n >= 200_000
    groups = _recorded_cases(preset, seed, n)
    bits = fp8emu_bits(preset, groups, route)
    head = z["head_bits"]
    diff = np.flatnonzero(bits[:len(head)] != head)
    assert diff.size == 0, f"first differences at {diff[:10].tolist()}"
    bad = [i for i, dg in enumerate(z["digests"])
           if hashlib.sha256(np.ascontiguousarray(bits[i * chunk:(i + 1) * chunk]).tobytes()).digest() != dg.tobytes()]
    assert bad == [], f"chunks of {chunk} cases that differ from MMA-Sim: {bad[:10]}"
    assert len(z["digests"]) == -(-n // chunk)
    # the claim in presets() is this file's count and version
    claims = [e for e in EVIDENCE[preset] if e[0] == "mmasim"]
    assert claims == [("mmasim", str(z["mmasim_version"]), n)]


@pytest.mark.parametrize("preset", RECORDED)
def test_recorded_cases_cover_special_values(preset):
    # the cases exercise what they claim: NaN, zeros (+0 only), subnormal results, and Inf
    # (f16 overflow, Inf operands; block-scaled presets: Inf from extreme scales)
    h = np.load(MMASIM / f"{preset}.npz")["head_bits"]
    e, sign = (0x7F800000, 0x80000000) if h.dtype == np.uint32 else (0x7C00, 0x8000)
    frac = ~(e | sign) & (0xFFFFFFFF if h.dtype == np.uint32 else 0xFFFF)
    assert ((h & e) == e)[(h & frac) != 0].size and (((h & e) == e) & ((h & frac) == 0)).any()
    assert (h == 0).any() and not (h == sign).any()
    assert (((h & e) == 0) & (h != 0)).any()


def test_recorded_digests_detect_a_change():
    # a one-ulp change in one output must show: the digests are of the outputs, not of nothing
    z = np.load(MMASIM / "cdna3-mfma-fp8.npz")
    groups = mmasim_cases.cases("cdna3-mfma-fp8", int(z["seed"]), 4096)
    bits = fp8emu_bits("cdna3-mfma-fp8", groups)
    bits[1234] ^= 1
    chunk = int(z["chunk"])
    ok = hashlib.sha256(np.ascontiguousarray(bits[:chunk]).tobytes()).digest() == z["digests"][0].tobytes()
    assert not ok


@pytest.mark.skipif(importlib.util.find_spec("mmasim") is None or importlib.util.find_spec("torch") is None,
                    reason="mmasim (and torch) not installed")
@pytest.mark.parametrize("preset", sorted(mmasim_cases.PRESET_CASES))
def test_preset_equals_live_mmasim_on_a_fresh_seed(preset):
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import record_mmasim
    seed = int.from_bytes(os.urandom(4), "little")
    groups = mmasim_cases.cases(preset, seed, 20_000)
    theirs = record_mmasim.run_mmasim(preset, groups)
    for route in ("rows", "tiles"):
        diff = np.flatnonzero(fp8emu_bits(preset, groups, route) != theirs)
        assert diff.size == 0, f"seed {seed}, {route}: {diff.size} differences, first {diff[:10].tolist()}"


class _ExactRoute:
    """What the exact GEMM route did: per call whether it served it (``taken``), the entries whose
    step grid cuts their products, per step that has any (``rows``: summed as truncated terms, or
    sent to the operand path as 1 x 1 tiles), and how often the operand path took the rest of K
    (``rest``)."""

    def __init__(self):
        self.taken, self.rows, self.rest = [], [], 0


@pytest.fixture
def exact_route(monkeypatch):
    """Record what the exact GEMM route does (tiles of 256 outputs and more try it)."""
    monkeypatch.setattr(exact_mod, "_EXACT_MIN", 256)
    seen = _ExactRoute()
    real_exact, real_ops, real_cut = routes.run_exact, exact_mod.run_operands, exact_mod._cut_sums

    def exact(*args):
        d = real_exact(*args)
        seen.taken.append(d is not None)
        return d

    def ops(ins_, a, b, *args, **kw):                  # the exact route's calls of the operand route
        if a.shape[1] == 1 == b.shape[1]:             # the failing entries, as 1 x 1 tiles
            seen.rows.append(a.shape[0])
        else:                                         # the rest of K
            seen.rest += 1
        return real_ops(ins_, a, b, *args, **kw)

    def cut(pa, *args):
        seen.rows.append(len(pa))
        return real_cut(pa, *args)

    monkeypatch.setattr(routes, "run_exact", exact)
    monkeypatch.setattr(exact_mod, "_cut_sums", cut)
    monkeypatch.setattr(exact_mod, "run_operands", ops)
    return seen


@pytest.mark.skipif(importlib.util.find_spec("mmasim") is None or importlib.util.find_spec("torch") is None,
                    reason="mmasim (and torch) not installed")
@pytest.mark.parametrize("preset", ["blackwell-tcgen05-f8f6f4", "rtx-blackwell-mma", "cdna3-mfma-fp8",
                                    "blackwell-tcgen05-mxf8f6f4"])
def test_exact_gemm_route_equals_live_mmasim(preset, exact_route):
    """GEMM tiles through the matrix-product route against MMA-Sim chaining the instruction along
    K (C carried from one call to the next), on Gaussian data, tiny elements and a huge C on some
    outputs (a fresh seed each run); ``kind::mxf8f6f4`` with E8M0 scales over 2**-9 ... 2**5."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import record_mmasim
    ins = INSTRUCTIONS[preset]
    k = ins.shape[2]
    M, N, K = 40, 24, 8 * k
    taken = exact_route.taken
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    for fa, fb in sorted({(ins.formats[0], ins.formats[0]), (ins.formats[0], ins.formats[1])}):
        x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))
        x[rng.random((M, K)) < 0.01] *= 2.0 ** -6
        a, b = fp8emu.encode(x, fa), fp8emu.encode(y, fb)
        rows_a = np.repeat(a, N, axis=0)                      # output (i, j) is row i * N + j
        rows_b = np.tile(b.T, (M, 1))
        scales, rows_s = {}, None
        if ins.block_scaled:                                  # one block per step
            sa = rng.integers(118, 133, (M, K // k), dtype=np.uint8)
            sb = rng.integers(118, 133, (K // k, N), dtype=np.uint8)
            scales = dict(a_scales=sa, b_scales=sb, scale_format="ue8m0")
            rows_s = np.repeat(sa, N, axis=0), np.tile(sb.T, (M, 1))
        # C: small with a tenth huge (C aligned to each step's grid, which cuts some entries' products),
        # everywhere above every step's products (C already on the grid), or far below them
        for name, c in (("mixed", np.where(rng.random((M, N)) < 0.1, 2.0 ** 26, rng.standard_normal((M, N)) * 4)),
                        ("above", rng.choice([-1.0, 1.0], (M, N)) * (64 + 63 * rng.random((M, N)))),
                        ("below", rng.choice([-1.0, 1.0], (M, N)) * 2.0 ** rng.integers(-60, -20, (M, N)))):
            c = c.astype(np.float32)
            got = mma(a, b, c, instruction=preset, a_format=fa, b_format=fb, **scales)
            assert taken[-1]
            d = c.ravel()
            for k0 in range(0, K, k):
                g = dict(a=rows_a[:, k0:k0 + k], b=rows_b[:, k0:k0 + k], c=d, a_format=fa, b_format=fb)
                if rows_s:
                    s = k0 // k
                    g.update(a_scales=rows_s[0][:, s:s + 1], b_scales=rows_s[1][:, s:s + 1], scale_format="ue8m0")
                d = record_mmasim.run_mmasim(preset, [g]).view(np.float32)
            diff = np.flatnonzero(_bits(got).ravel() != d.view(np.uint32))
            assert diff.size == 0, (f"seed {seed}, {fa} x {fb}, C {name}: {diff.size} differences, "
                                    f"first {diff[:10].tolist()}")


# ----------------------------------------------------------------------------- code-pair tables
# FP8/FP6/FP4 operands take products from tables of every code pair, in blocks of rows, columns and
# K steps; the per-operand decode they replaced (the path the recorded vectors were first matched
# with, still the one of the 16-bit inputs) must give the same bits on the same inputs.
TABLE_PRESETS = sorted(n for n, i in INSTRUCTIONS.items() if i.formats[0] not in ("float16", "bfloat16", "tf32"))
# presets without MMA-Sim vectors borrow the case generator of one with the same operand and output types
_CASES_OF = {"hopper-mma": "hopper-wgmma", "hopper-mma-f16": "hopper-wgmma-f16", "blackwell-mma": "ada-mma",
             "blackwell-mma-f16": "ada-mma-f16", "rubin-tcgen05-mxf4nvf4": "blackwell-tcgen05-mxf4nvf4"}


def _decoded(ins, a, b, c, g, a_scales=None, b_scales=None):
    """The per-operand decode path on broadcastable (M|1, N|1, K) operands."""
    return datapaths.reference(ins, a, b, ins_mod._c_in(c, c.shape, ins), g["a_format"], g["b_format"], a_scales,
                               b_scales, g.get("scale_format"))


def _bits(d):
    return d.view(np.uint32 if d.dtype == np.float32 else np.uint16)


@pytest.mark.parametrize("preset", TABLE_PRESETS)
def test_code_pair_tables_equal_the_per_operand_decode(preset, monkeypatch):
    ins = INSTRUCTIONS[preset]
    assert preset in mmasim_cases.PRESET_CASES or preset in _CASES_OF
    for g in mmasim_cases.cases(_CASES_OF.get(preset, preset), 99, 3000):
        # two instructions chained along K (the second on other rows' codes), so C is carried
        a = np.concatenate([g["a"], np.roll(g["a"], 1, axis=0)], axis=1)
        b = np.concatenate([g["b"], np.roll(g["b"], 3, axis=0)], axis=1)
        sc = {}
        if "a_scales" in g:
            sc = {k: np.concatenate([g[k], np.roll(g[k], 2, axis=0)], axis=1) for k in ("a_scales", "b_scales")}
        kw = dict(instruction=preset, a_format=g["a_format"], b_format=g["b_format"],
                  scale_format=g.get("scale_format"), **sc)
        got = dot(a, b, g["c"], **kw)
        want = _decoded(ins, a[:, None], b[:, None], g["c"][:, None], g,
                        *[sc[k][:, None] for k in ("a_scales", "b_scales") if sc])[:, 0]
        np.testing.assert_array_equal(_bits(got), _bits(want))
        # tiles: blocks of a few products, so rows, columns and K steps are all split
        m, n = 7, 5
        A, B, C = a[:m], b[m:m + n].T, g["c"][:m * n].reshape(m, n)
        tsc = {"a_scales": sc["a_scales"][:m], "b_scales": sc["b_scales"][m:m + n].T} if sc else {}
        want = _decoded(ins, A[:, None], B.T[None], C, g,
                        *([tsc["a_scales"][:, None], tsc["b_scales"].T[None]] if sc else []))
        monkeypatch.setattr(tables_mod, "_TILE", 2 * ins.step)
        got = mma(A, B, C, **{**kw, **tsc})
        monkeypatch.undo()
        np.testing.assert_array_equal(_bits(got), _bits(want))


OPERAND_PRESETS = [n for n in TABLE_PRESETS if INSTRUCTIONS[n].datapath in ("fused", "scaled", "paired")]
# descriptions outside the catalogue, where a zero product's exponent can decide a step's grid
# (zero_exp above real product exponents, few fraction bits)
CUSTOM = {"coarse-f32": dict(base="hopper-wgmma", frac_bits=4, zero_exp=-20),
          # 13 fraction bits, but a zero product's exponent above float32's normals: not C's own grid
          "e8m13-zero-above": dict(base="hopper-wgmma", zero_exp=-20),
          "coarse-f16": dict(base="rtx-blackwell-mma-f16", frac_bits=3, zero_exp=-12),
          "coarse-scaled": dict(base="blackwell-tcgen05-mxf8f6f4", frac_bits=4, zero_exp=-100)}


def _hostile_tiles(rng, ins, fa, fb, T, M, N, K):
    """Codes of every kind (zeros, all-zero steps, subnormals, Inf/NaN, the largest) and C zero,
    subnormal, normal, huge, Inf or NaN in the output type."""
    def codes(f, shape):
        bits = fp8emu.get_format(f).bits
        x = rng.integers(0, 1 << bits, shape, dtype=np.uint8)
        x[rng.random(shape) < 0.3] = 0
        low = rng.random(shape) < 0.2                             # subnormals: exponent field zero
        mbits = fp8emu.get_format(f).mbits
        x[low] = (x[low] & ((1 << mbits) - 1)) | (x[low] & (1 << (bits - 1)))
        return x
    a, b = codes(fa, (T, M, K)), codes(fb, (T, K, N))

    def tiny(x, f):                               # exponent field 0 or 1, sign kept: the smallest values
        g = fp8emu.get_format(f)
        return (x & ((1 << (g.mbits + 1)) - 1)) | (x & (1 << (g.bits - 1)))
    a[:, 2, :] = tiny(a[:, 2, :], fa)             # an output of tiny products, a few of them zero
    b[:, :, 0] = tiny(b[:, :, 0], fb)
    a[:, 2, ::7] = 0
    a[:, 0, :] = 0                                # an output row and column of zero products only,
    b[:, :, -1] = 0                               # and (below) whole steps of them
    a[:, 1, :ins.step] = 0
    dt, ut = (np.float32, np.uint32) if ins.out == "float32" else (np.float16, np.uint16)
    width = 8 * np.dtype(ut).itemsize
    c = rng.integers(0, 1 << width, (T, M, N), dtype=np.uint64).astype(ut).view(dt).copy()
    kind = rng.integers(0, 4, (T, M, N))
    c[kind == 0] = 0
    c[kind == 1] = (rng.integers(1, 1 << 10, (kind == 1).sum()).astype(ut)).view(dt)   # subnormals
    c[kind == 2] = rng.standard_normal((kind == 2).sum()).astype(dt)
    return a, b, c


@pytest.mark.parametrize("preset", OPERAND_PRESETS + list(CUSTOM))
def test_operand_path_equals_the_per_operand_decode(preset, monkeypatch):
    # tiles and GEMMs of the fused, scaled and paired datapaths decode each operand once and form
    # products by broadcasting; on every format pair, hostile codes, C and block scales (NaN,
    # extreme), in chunks and blocks of every size (tiles, K and rows all split) and in both
    # orientations, they give the per-operand decode's bits
    if preset in CUSTOM:
        import dataclasses
        kw = dict(CUSTOM[preset])
        ins = dataclasses.replace(INSTRUCTIONS[kw.pop("base")], name=preset, **kw)
    else:
        ins = INSTRUCTIONS[preset]
    rng = np.random.default_rng(zlib.crc32(preset.encode()))
    L = ins.step
    for fa in ins.formats:
        for fb in ins.formats:
            # a 2-D tile (N < M: computed as its transpose), a batch of one, a batch of six
            for T, M, N, chunk, tile, two_d in ((1, 40, 13, 1 << 19, 1 << 18, True),
                                                (1, 5, 11, L * 16, 2 * L * 3, False),
                                                (6, 4, 3, 7 * L * 3, 5 * L, False)):
                K = 3 * L
                a, b, c = _hostile_tiles(rng, ins, fa, fb, T, M, N, K)
                sc = {}
                if ins.block_scaled:               # E8M0: the whole range, NaN (255) included
                    sa = rng.integers(0, 256, (T, M, K // 32), dtype=np.uint8)
                    sb = rng.integers(0, 256, (T, K // 32, N), dtype=np.uint8)
                    sa[:, 1], sb[:, :, -1] = 0, 254                     # the extremes, whole rows
                    sa[:, 3, 0], sb[:, 1, 1] = 255, 255
                    sa[:, 2], sb[:, :, 0] = 52, 52                      # products scaled to ~2**-140,
                    c[:, 2, 0] = 2.0 ** -115 if ins.out == "float32" else 0  # beside a small C
                    sc = dict(a_scales=sa, b_scales=sb)
                monkeypatch.setattr(operands_mod, "_CHUNK", chunk)
                monkeypatch.setattr(operands_mod, "OP_TILE", tile)
                one = (lambda x: x[0]) if two_d else (lambda x: x)
                got = mma(one(a), one(b), one(c), instruction=ins, a_format=fa, b_format=fb,
                          **{k: one(v) for k, v in sc.items()}).reshape(T, M, N)
                monkeypatch.undo()
                for t in range(T):
                    want = _decoded(ins, a[t][:, None], b[t].T[None], c[t], dict(a_format=fa, b_format=fb),
                                    *([sc["a_scales"][t][:, None], sc["b_scales"][t].T[None]] if sc else []))
                    np.testing.assert_array_equal(_bits(got[t]), _bits(want), err_msg=f"{fa} x {fb}, T={T}")


EXACT_PRESETS = [n for n in OPERAND_PRESETS
                 if INSTRUCTIONS[n].datapath in ("fused", "paired") and INSTRUCTIONS[n].out == "float32"]


def _zero_rows_and_steps(a, b, c, L):
    """Codes a (M, K), b (K, N) and C (M, N), in place: a zero row and column, whole steps of zero
    products, -0 and subnormal C, and small C beside row 3's all-zero steps (it keeps every bit)."""
    a[3], b[:, 5] = 0, 0
    a[:, L:3 * L], b[5 * L:6 * L] = 0, 0
    c[0, :4] = [-0.0, 2.0 ** -140, -(2.0 ** -130), 0.0]
    c[3, :3] = [(1 + 2.0 ** -23) * 2.0 ** -30, -(1 + 2.0 ** -22) * 2.0 ** -40, 2.0 ** -140]


@pytest.mark.parametrize("preset", EXACT_PRESETS)
def test_exact_gemm_route_equals_the_per_operand_decode(preset, exact_route):
    """A GEMM tile whose steps truncate nothing is matrix products (``run_exact``): on data where
    every entry passes its check, where some fail it (tiny elements, a huge C on a tenth of the
    outputs: their sums of truncated terms), where a huge C makes most fail (the operand path
    takes the rest of K), with zero rows,
    all-zero steps, -0 and subnormal C, and with a non-finite code (the operand path takes the rest), it gives
    the per-operand decode's bits, and it is taken where it should be."""
    ins = INSTRUCTIONS[preset]
    L = ins.step
    M, N, K = 36, 24, 12 * L                   # 864 outputs: past the code-pair path's 512
    seen = exact_route
    rng = np.random.default_rng(zlib.crc32(preset.encode()) + 1)
    for fa, fb in sorted({(ins.formats[0], ins.formats[0]), (ins.formats[0], ins.formats[-1])}):
        lo = min(fp8emu.get_format(f).max for f in (fa, fb))
        wide = lo > 8               # FP8: Gaussian data; FP6/FP4: a narrower spread
        for case in ("plain", "tiny", "some-huge-c", "huge-c", "tiny-c", "zeros", "non-finite"):
            sd = 1.0 if wide else 0.7
            k = L if case == "tiny-c" else K            # one step: later ones would round its C away
            x, y = rng.standard_normal((M, k)) * sd, rng.standard_normal((k, N)) * sd
            c = (rng.standard_normal((M, N)) * 4).astype(np.float32)
            if case == "tiny-c":                        # far below the products: C cut to nothing
                c = (rng.choice([-1.0, 1.0], (M, N)) * 2.0 ** rng.integers(-60, -20, (M, N))).astype(np.float32)
            if case == "tiny":
                x[rng.random((M, K)) < 0.01] *= 2.0 ** -6
                y[rng.random((K, N)) < 0.01] *= 2.0 ** -5
            if case == "some-huge-c":               # a tenth of the entries fail at every step
                c[rng.random((M, N)) < 0.1] = -(2.0 ** 26)
            if case == "huge-c":
                c[:] = 2.0 ** 40
            a, b = fp8emu.encode(x, fa), fp8emu.encode(y, fb)
            if case == "zeros":
                _zero_rows_and_steps(a, b, c, L)
            if case == "non-finite":
                a[1, 1] = fp8emu.encode(np.array([np.nan]), fa)[0] if fp8emu.get_format(fa).has_nan else a[1, 1]
            before = sum(seen.taken)
            got = mma(a, b, c, instruction=preset, a_format=fa, b_format=fb)
            want = _decoded(ins, a[:, None], b.T[None], c, dict(a_format=fa, b_format=fb))
            np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{fa} x {fb}, {case}")
            if ins.frac_bits >= 24 and wide and case in ("plain", "zeros"):
                assert sum(seen.taken) > before, (fa, fb, case)
    if ins.frac_bits >= 24:
        assert any(seen.taken) and seen.rows and seen.rest, vars(seen)
    else:                           # 13 bits: Gaussian steps mostly truncate, the sample declines
        assert seen.taken and not any(seen.taken), vars(seen)


SCALED_PRESETS = [n for n in OPERAND_PRESETS if INSTRUCTIONS[n].datapath == "scaled"]


@pytest.mark.parametrize("preset", SCALED_PRESETS)
def test_exact_gemm_route_of_block_scaled_steps_equals_the_per_operand_decode(preset, exact_route):
    """``kind::mxf8f6f4`` GEMM tiles (one E8M0 scale per row and per column of a step) through the
    matrix-product route: MX-quantized Gaussian data (scales near the elements' range), random
    scales over 2**-7 ... 2**7 (a later step's small products truncated against a large C: many
    entries fail), scales over 2**-47 ... 2**42, a huge C on a tenth of the outputs, zero rows,
    all-zero steps and -0 C, scales that put the smallest real product exponent just below float32's
    normals (with zero and subnormal C), and the cases the route declines (a NaN
    scale; scales so small that a zero product's exponent could win): the per-operand decode's bits."""
    # each format's smallest normal exponent (OCP MX v1.0): its subnormals' exponent in MMA-Sim
    emin = {"e4m3fn": -6, "e5m2": -14, "e3m2fn": -2, "e2m3fn": 0, "e2m1fn": 0}
    ins = INSTRUCTIONS[preset]
    L = ins.step
    M, N, K = 40, 112, 10 * L                   # 4480 outputs: past the route's 4096
    rng = np.random.default_rng(zlib.crc32(preset.encode()) + 2)
    seen = exact_route
    for fa, fb in (("e4m3fn", "e4m3fn"), ("e5m2", "e2m1fn"), ("e3m2fn", "e2m3fn")):
        # the scale codes whose two scales put the smallest real product exponent at -130 or -131:
        # below float32's smallest normal (-126), above a zero product's (-133)
        small = 127 + (-130 - emin[fa] - emin[fb]) // 2
        for case in ("mx", "random", "wide", "some-huge-c", "zeros", "small-scales", "nan-scale", "tiny-scales"):
            x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))
            a, b = fp8emu.encode(x, fa), fp8emu.encode(y, fb)
            lo, hi = {"mx": (118, 121), "wide": (80, 170), "tiny-scales": (0, 4),
                      "small-scales": (small, small + 3)}.get(case, (120, 135))
            sa = rng.integers(lo, hi, (M, K // L), dtype=np.uint8)
            sb = rng.integers(lo, hi, (K // L, N), dtype=np.uint8)
            c = (rng.standard_normal((M, N)) * 4).astype(np.float32)
            if case == "some-huge-c":
                c[rng.random((M, N)) < 0.1] = 2.0 ** 30
            if case == "zeros":
                _zero_rows_and_steps(a, b, c, L)
            if case == "small-scales":       # C as small as the products, zero on a third of the outputs
                c = np.where(rng.random((M, N)) < 1 / 3, 0.0, c * 2.0 ** -126).astype(np.float32)
            if case == "nan-scale":
                sa[2, 1] = 255
            before = len(seen.taken)
            got = mma(a, b, c, instruction=preset, a_format=fa, b_format=fb, a_scales=sa, b_scales=sb,
                      scale_format="ue8m0")
            want = _decoded(ins, a[:, None], b.T[None], c, dict(a_format=fa, b_format=fb, scale_format="ue8m0"),
                            sa[:, None], sb.T[None])
            np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{fa} x {fb}, {case}")
            assert len(seen.taken) == before + 1
            assert seen.taken[-1] == (case not in ("nan-scale", "tiny-scales")), (fa, fb, case)
    assert seen.rows and seen.rest, vars(seen)


@pytest.mark.parametrize("fa,fb", [("e4m3fn", "e4m3fn"), ("e5m2", "e5m2"), ("e4m3fnuz", "e5m2fnuz"),
                                   ("e2m1fn", "e3m2fn"), ("e2m3fn", "e5m2")])
@pytest.mark.parametrize("L", [16, 32, 64])
def test_sums_of_powers_give_each_steps_largest_exponent_and_lowest_bit(fa, fb, L):
    """The exact route reads a step's largest product exponent, and its lowest product bit, from the
    binade of a sum of powers of two (a matrix product): against the maximum (minimum) taken term by
    term, on steps where every product sits at the largest exponent (the sum's top edge), one at the
    largest among the smallest (its bottom edge), random steps, and steps of zero products."""
    import math
    f, g = fp8emu.get_format(fa), fp8emu.get_format(fb)
    rng = np.random.default_rng(L)

    def props(fmt):
        """Per code: MMA-Sim exponent (floor(log2 |v|), at least emin) and lowest set bit; None for 0."""
        vals = fp8emu.decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)
        emin = math.floor(math.log2(fmt.min_normal))
        out = []
        for v in vals:
            if v == 0 or not math.isfinite(v):
                out.append(None)
                continue
            m, e = math.frexp(abs(v))
            low = e - 53
            while not (abs(v) / 2.0 ** low) % 2:
                low += 1
            out.append((max(e - 1, emin), low))
        return out
    pa, pb = props(f), props(g)
    fin_a = [i for i, q in enumerate(pa) if q is not None]
    fin_b = [i for i, q in enumerate(pb) if q is not None]
    top_a = max(fin_a, key=lambda i: pa[i][0])
    top_b = max(fin_b, key=lambda i: pb[i][0])
    bot_a = min(fin_a, key=lambda i: pa[i][0])
    bot_b = min(fin_b, key=lambda i: pb[i][0])
    rows = [np.full(L, top_a), np.r_[top_a, np.full(L - 1, bot_a)], np.zeros(L, int)]
    cols = [np.full(L, top_b), np.full(L, bot_b), rng.choice(fin_b, L)]
    rows += [rng.choice(fin_a, L) for _ in range(5)]
    cols += [rng.choice(fin_b, L) for _ in range(5)]
    zero_a = [i for i, q in enumerate(pa) if q is None and fp8emu.decode(np.array([i], np.uint8), f)[0] == 0][0]
    rows[2][:] = zero_a
    A, B = np.array(rows, np.uint8), np.array(cols, np.uint8)
    for what, k in (("exponent", 0), ("low", 1)):
        powers = exact_mod._power_tables(f, g, L, what)
        assert powers is not None, (what, fa, fb)
        got = exact_mod._largest_sums(np.matmul(powers[0][A], powers[1][B].T), powers)
        for i in range(len(rows)):
            for j in range(len(cols)):
                terms = [(pa[x][k], pb[y][k]) for x, y in zip(A[i], B[j]) if pa[x] and pb[y]]
                if not terms:           # no non-zero product: below every real exponent
                    assert got[i, j] < min(-pa[x][k] - pb[y][k] if what == "low" else pa[x][k] + pb[y][k]
                                           for x in fin_a for y in fin_b), (what, i, j)
                    continue
                want = max(u + v for u, v in terms) if what == "exponent" else max(-u - v for u, v in terms)
                assert got[i, j] == want, (what, i, j, got[i, j], want)


@pytest.mark.parametrize("block", [None, 5000])
@pytest.mark.parametrize("preset", ["blackwell-mma", "blackwell-tcgen05-f8f6f4", "cdna3-mfma-fp8"])
def test_exact_gemm_route_over_chunks_of_steps(preset, block, monkeypatch, exact_route):
    """A 256 x 256 GEMM takes its steps' matrix products in several chunks of steps (and, with the
    route's block of outputs made small, in blocks of 19 rows and chunks of one step): the operand
    path's bits (that path is checked against the per-operand decode above), on Gaussian data with
    a few tiny elements and a C on a twentieth of the outputs large enough that their grid cuts
    products."""
    if block:
        monkeypatch.setattr(exact_mod, "_EXACT_OUT", block)
    ins = INSTRUCTIONS[preset]
    fmt = ins.formats[0]
    M = N = 256
    K = 40 * ins.step                               # the route takes 4 steps per matrix product here
    rng = np.random.default_rng(7)
    x = rng.standard_normal((M, K))
    x[rng.random((M, K)) < 0.003] *= 2.0 ** -9          # a few tiny elements: rows' low bits differ
    a, b = fp8emu.encode(x, fmt), fp8emu.encode(rng.standard_normal((K, N)), fmt)
    c = np.where(rng.random((M, N)) < 0.05, 2.0 ** 28, rng.standard_normal((M, N))).astype(np.float32)
    got = mma(a, b, c, instruction=preset, a_format=fmt)
    assert exact_route.taken == [True] and exact_route.rows
    want = operands_mod.run_operands(ins, a[None], np.ascontiguousarray(b.T)[None], c[None], fp8emu.get_format(fmt),
                                      fp8emu.get_format(fmt))[0]
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("blocks", [False, True])
@pytest.mark.parametrize("preset", [n for n in EXACT_PRESETS if INSTRUCTIONS[n].frac_bits >= 24])
def test_exact_gemm_route_at_its_boundaries(preset, blocks, monkeypatch, exact_route):
    """Products one bit below and exactly on a step's grid, and a C whose last bit the grid cuts
    or keeps, each in an output where large products cancel so that the bit shows: the route's
    checks must single out the first as an entry whose grid cuts it and keep the others (expected values from the
    instruction's definition: terms truncated to 2**(E - F), E the largest product exponent).
    ``blocks``: the route works in blocks of two rows, the entry below the grid in the second
    block, beside a row of the first whose elements' low bits are higher."""
    import math
    ins = INSTRUCTIONS[preset]
    L, F = ins.step, ins.frac_bits
    fmt = fp8emu.get_format(ins.formats[0])
    M, N, K = 36, 24, 4 * L
    if blocks:
        monkeypatch.setattr(exact_mod, "_EXACT_OUT", 2 * N)
    taken, rows = exact_route.taken, exact_route.rows    # rows: entries whose step grid cuts them
    h = math.floor(math.log2(fmt.max))            # big products 2**(2h), cancelled by their negatives
    tmin = round(math.log2(fmt.min_subnormal))

    def tile(entries, c0):
        x, y = np.zeros((M, K)), np.zeros((K, N))
        for n, ((i, j), (pa, pb), small) in enumerate(entries):
            k = 4 * n                             # apart along K, at the same positions of the halves
            x[i, k], y[k, j] = 2.0 ** pa, 2.0 ** pb
            x[i, k + 1], y[k + 1, j] = -(2.0 ** pa), 2.0 ** pb
            if small:
                x[i, k + 2], y[k + 2, j] = 2.0 ** small[0], 2.0 ** small[1]
        a, b = fp8emu.encode(x, fmt), fp8emu.encode(y, fmt)
        assert (fp8emu.decode(a, fmt, dtype=np.float64) == x).all()
        c = np.full((M, N), c0, np.float32)
        return mma(a, b, c, instruction=preset, a_format=fmt.name), c

    t = 2 * h - F - 1                             # one bit below the grid 2**(2h - F)
    (bi, bj), (pi, pj) = ((3, 2), (1, 4)) if blocks else ((1, 2), (3, 4))
    d, c = tile([((bi, bj), (h, h), (tmin, t - tmin)), ((pi, pj), (h, h), (t + 1 - tmin, tmin))], 0.0)
    assert taken[-1] and rows == [1]              # the entry below the grid alone, at its one step
    assert d[bi, bj] == 0.0                       # truncated away
    assert d[pi, pj] == 2.0 ** (t + 1)            # on the grid: kept
    assert (np.delete(d.ravel(), [bi * N + bj, pi * N + pj]) == 0).all()
    # C = 1 + 2**-23 (exponent 0) beside products of exponent g that cancel: its last bit is below
    # the grid 2**(g - F) where g > F - 23 (fused) or g > 1 (paired: C is aligned to 2**(E - 24))
    keep = 1 if ins.datapath == "paired" else F - 23
    c0 = np.float32(1 + 2.0 ** -23)
    for g, want in ((keep + 1, 1.0), (keep, float(c0))):
        d, c = tile([((5, 6), (g // 2, g - g // 2), None)], c0)
        assert taken[-1]
        assert d[5, 6] == np.float32(want), (g, d[5, 6])
        assert (np.delete(d.ravel(), 5 * N + 6) == c0).all()


@pytest.mark.parametrize("layout", ["offset", "fortran", "broadcast", "four-d"])
@pytest.mark.parametrize("preset,fa,fb", [("ada-mma", "e4m3fn", "e4m3fn"), ("rtx-blackwell-mma", "e5m2", "e3m2fn"),
                                          ("cdna3-mfma-fp8", "e4m3fnuz", "e5m2fnuz"),
                                          ("blackwell-tcgen05-mxf8f6f4", "e4m3fn", "e2m1fn")])
def test_operand_path_reads_every_memory_layout(preset, fa, fb, layout):
    # the operand path moves codes and C in 8-byte words where their rows are contiguous and element
    # by element elsewhere: slices at odd offsets, Fortran order and broadcast operands give the
    # per-operand decode's bits, and no input is written
    ins = INSTRUCTIONS[preset]
    rng = np.random.default_rng(zlib.crc32(f"{preset}{layout}".encode()))
    M, N, K = ins.shape
    T = 6
    a, b, c = _hostile_tiles(rng, ins, fa, fb, T, M, N, K)
    sa = sb = None
    if ins.block_scaled:
        sa = rng.integers(100, 150, (T, M, K // 32), dtype=np.uint8)
        sb = rng.integers(100, 150, (T, K // 32, N), dtype=np.uint8)
    if layout == "offset":                        # rows at odd byte offsets inside wider arrays
        wa = np.zeros((T, M, K + 9), np.uint8)
        wa[:, :, 1:K + 1] = a
        wb = np.zeros((T, K + 3, N + 5), np.uint8)
        wb[:, 3:, 2:N + 2] = b
        wc = np.zeros((T, M, N + 1), c.dtype)
        wc[:, :, 1:] = c
        args = (wa[:, :, 1:K + 1], wb[:, 3:, 2:N + 2], wc[:, :, 1:])
    elif layout == "fortran":
        args = (np.asfortranarray(a), np.asfortranarray(b), np.asfortranarray(c))
    elif layout == "broadcast":                   # one A and one C for every tile
        a, c = np.broadcast_to(a[:1], a.shape), np.broadcast_to(c[:1], c.shape)
        args = (a[0], b, c[0])
    else:                                         # batch (2, 3) from a (2, 1) and a (1, 3) batch
        a = np.broadcast_to(a[[0, 3]][:, None], (2, 3, M, K)).reshape(T, M, K)
        b = np.broadcast_to(b[:3][None], (2, 3, K, N)).reshape(T, K, N)
        args = (a.reshape(2, 3, M, K)[:, :1], b.reshape(2, 3, K, N)[:1], c.reshape(2, 3, M, N))
        if sa is not None:
            sa = np.broadcast_to(sa[[0, 3]][:, None], (2, 3) + sa.shape[1:]).reshape(sa.shape)
            sb = np.broadcast_to(sb[:3][None], (2, 3) + sb.shape[1:]).reshape(sb.shape)
    kw = {}
    if sa is not None:
        kw = dict(a_scales=sa.reshape(2, 3, M, -1)[:, :1] if layout == "four-d" else sa,
                  b_scales=sb.reshape(2, 3, -1, N)[:1] if layout == "four-d" else sb)
    before = [np.array(x, copy=True) for x in args]
    got = mma(*args, instruction=ins, a_format=fa, b_format=fb, **kw).reshape(T, M, N)
    for x, x0 in zip(args, before):
        np.testing.assert_array_equal(_bits(np.asarray(x)) if x.dtype.kind == "f" else x,
                                      _bits(x0) if x0.dtype.kind == "f" else x0)
    for t in range(T):
        want = _decoded(ins, a[t][:, None], b[t].T[None], c[t], dict(a_format=fa, b_format=fb),
                        *([sa[t][:, None], sb[t].T[None]] if sa is not None else []))
        np.testing.assert_array_equal(_bits(got[t]), _bits(want), err_msg=f"{layout}, tile {t}")


@pytest.mark.parametrize("preset", [n for n in TABLE_PRESETS if INSTRUCTIONS[n].datapath == "grouped"])
@pytest.mark.parametrize("kind,block", [("ue8m0", 32), ("ue8m0", 16), ("ue4m3", 16)])
def test_group_sums_as_matrix_products_equal_the_per_operand_decode(preset, kind, block, monkeypatch):
    # FP4 group sums are exact in float32, so tiles and GEMMs of kind::mxf4nvf4 take them (and the
    # counts of non-zero products) from matrix products; hostile codes, C and scales (NaN, zero,
    # extreme), all-zero and cancelling groups, blocks of every size, against the per-operand decode
    ins = INSTRUCTIONS[preset]
    rng = np.random.default_rng(zlib.crc32(f"{preset}{kind}{block}".encode()))
    for T, M, N, tile, two_d in ((1, 40, 13, 1 << 18, True), (5, 4, 3, 16 * 2 * 3, False),
                                 (1, 6, 10, 16 * 4, False)):
        K = 2 * ins.step
        a, b, c = _hostile_tiles(rng, ins, "e2m1fn", "e2m1fn", T, M, N, K)
        a[:, 3, :16] = 2                                          # a group of +1 and -1 products that cancel
        b[:, :16, 1] = np.where(np.arange(16) % 2, 0x2, 0xA)
        nk = K // block
        lo, hi = (0, 256) if kind == "ue8m0" else (0, 128)
        sa = rng.integers(lo, hi, (T, M, nk), dtype=np.uint8)
        sb = rng.integers(lo, hi, (T, nk, N), dtype=np.uint8)
        sa[:, 0, 0] = 0xFF if kind == "ue8m0" else 0x7F            # NaN scales
        sb[:, -1, -1] = 0xFF                                       # NaN (ue8m0), 2**-127 * ... (ue4m3)
        if kind == "ue4m3":
            sb[:, :, 0] = 0                                        # zero scales on a whole column
        monkeypatch.setattr(groups_mod, "_OP_TILE", tile)
        one = (lambda x: x[0]) if two_d else (lambda x: x)
        got = mma(one(a), one(b), one(c), instruction=preset, a_format="e2m1fn", a_scales=one(sa),
                  b_scales=one(sb), scale_format=kind).reshape(T, M, N)
        monkeypatch.undo()
        for t in range(T):
            want = _decoded(ins, a[t][:, None], b[t].T[None], c[t], dict(a_format="e2m1fn", b_format="e2m1fn",
                            scale_format=kind), sa[t][:, None], sb[t].T[None])
            np.testing.assert_array_equal(_bits(got[t]), _bits(want), err_msg=f"T={T}")


@pytest.mark.parametrize("preset,fa,fb,kind", [
    ("hopper-wgmma", "e4m3fn", "e5m2", None), ("rtx-blackwell-mma-f16", "e3m2fn", "e2m1fn", None),
    ("blackwell-tcgen05-mxf8f6f4", "e4m3fn", "e2m3fn", "ue8m0"), ("blackwell-tcgen05-mxf4nvf4", "e2m1fn", "e2m1fn", "ue4m3"),
    ("cdna3-mfma-fp8", "e4m3fnuz", "e5m2fnuz", None), ("hopper-mma-bf16in", "bfloat16", "bfloat16", None)])
def test_a_batch_of_tiles_is_each_tile(preset, fa, fb, kind):
    # leading dimensions broadcast as in np.matmul; every tile is its own instruction
    ins = INSTRUCTIONS[preset]
    rng = np.random.default_rng(11)
    m, n, k = 5, 3, ins.shape[2]
    wide = fa == "bfloat16"
    def codes(f, shape):
        if wide:
            return rng.integers(0, 1 << 16, shape, dtype=np.uint16)
        return rng.integers(0, 1 << fp8emu.get_format(f).bits, shape, dtype=np.uint8)
    a, b = codes(fa, (2, 1, m, k)), codes(fb, (3, k, n))
    c = rng.standard_normal((2, 3, m, n)).astype(np.float32 if ins.out == "float32" else np.float16)
    kw = dict(instruction=preset, a_format=fa, b_format=fb)
    sa = sb = None
    if kind:
        blk = 16 if kind == "ue4m3" else 32
        lo, hi = (30, 70) if kind == "ue4m3" else (110, 140)
        sa = rng.integers(lo, hi, (2, 1, m, k // blk), dtype=np.uint8)
        sb = rng.integers(lo, hi, (3, k // blk, n), dtype=np.uint8)
        kw["scale_format"] = kind
    got = mma(a, b, c, **kw, **({} if sa is None else dict(a_scales=sa, b_scales=sb)))
    assert got.shape == (2, 3, m, n)
    for i in range(2):
        for j in range(3):
            one = mma(a[i, 0], b[j], c[i, j], **kw, **({} if sa is None else dict(a_scales=sa[i, 0], b_scales=sb[j])))
            np.testing.assert_array_equal(_bits(got[i, j]), _bits(one))
    # C broadcasts too, and the inputs are left as they were
    a0 = a.copy()
    d = mma(a, b, c[0, 0], **kw, **({} if sa is None else dict(a_scales=sa, b_scales=sb)))
    assert d.shape == (2, 3, m, n) and (a == a0).all()
    with pytest.raises(ValueError, match="batch dimensions"):
        mma(a[:, 0], np.stack([b[0]] * 3), **kw)
    if sa is not None:
        with pytest.raises(ValueError, match="batch dimensions of a_scales"):
            mma(a, b, **kw, a_scales=np.stack([sa] * 4, axis=1)[:, :, 0], b_scales=sb)
        with pytest.raises(ValueError, match="b_scales must be"):
            mma(a, b, **kw, a_scales=sa, b_scales=sb[..., :1])


def test_code_pair_tables_hold_exact_products():
    # every e5m2 x e4m3fn pair: the exact product of the spec values (NaN for NaN and 0 * Inf),
    # the sign of a zero the XOR of the signs; a zero product carries zero_exp, 1 * 1 exponent 0
    import math
    from fractions import Fraction
    from oracle import code_value
    P, X, _ = codes_mod.pair_tables(fp8emu.get_format("e5m2"), fp8emu.get_format("e4m3fn"), -133)
    for ca in range(256):
        va = code_value("e5m2", ca)
        for cb in range(256):
            vb, p = code_value("e4m3fn", cb), float(P[(ca << 8) | cb])
            if va is None or vb is None or (math.isinf(va) and vb == 0):
                assert math.isnan(p), (ca, cb)
            elif math.isinf(va):
                assert p == (va if vb > 0 else -va), (ca, cb)
            else:
                assert Fraction(p) == va * vb and math.copysign(1, p) == (-1) ** ((ca >> 7) ^ (cb >> 7)), (ca, cb)
    assert X[0] == -133 and X[(0x3C << 8) | 0x38] == 0


# ----------------------------------------------------------------------------- public recordings
KNOWN = json.loads((REC / "known_exceptions.json").read_text())
_GPU_PRESET = {"ada": "ada-mma", "l40s": "ada-mma", "h100": "hopper-mma", "h200": "hopper-mma",
               "b200": "blackwell-mma"}
RECORDINGS = [(p.stem, arr) for p in sorted(REC.glob("*.npz")) for arr in ("d_bits", "d16_bits")
              if arr in np.load(p)]


_FAMILY = {"v100": "volta", "a100": "ampere", "a2": "ampere", "ada": "ada", "l40s": "ada", "h100": "hopper",
           "h200": "hopper", "b200": "blackwell"}
_WIDE = {"fp16": ("f16", "float16"), "bf16": ("bf16", "bfloat16"), "tf32": ("tf32", "tf32")}


def recording_preset(stem, arr):
    gpu, fmt = stem.split("_")
    base = _GPU_PRESET[gpu] if fmt in FMT else f"{_FAMILY[gpu]}-mma-{_WIDE[fmt][0]}in"
    return base + ("-f16" if arr == "d16_bits" else "")


def replay(stem, arr, preset=None):
    gpu, fmt = stem.split("_")
    z = np.load(REC / f"{stem}.npz")
    c = z["c_bits"].view(np.float32)
    if fmt in _WIDE:          # 16-bit inputs: the recorded C, fp32 and fp16 results
        ins, f = recording_preset(stem, arr), _WIDE[fmt][1]
        cc = c.astype(np.float16) if arr == "d16_bits" else c
        return dot(z["a"], z["b"], cc, instruction=ins, a_format=f).view(z[arr].dtype), z[arr]
    base = preset or _GPU_PRESET[gpu]
    if arr == "d16_bits":
        got = dot(z["a"], z["b"], c.astype(np.float16), instruction=base + "-f16", a_format=FMT[fmt])
        return got.view(np.uint16), z[arr]
    if gpu in ("h100", "h200") and preset is None:
        c = np.zeros_like(c)     # their H100/H200 FP8 rows are A.B alone (their validation script, and the data)
    return dot(z["a"], z["b"], c, instruction=base, a_format=FMT[fmt]).view(np.uint32), z[arr]


def test_every_recording_file_is_here():
    # FP8: 5 GPUs x 2 formats, fp32 results, fp16 results for all but L40S (18); 16-bit inputs (22 files): V100 fp16,
    # 7 GPUs x (fp16, bf16, tf32), fp32 results, fp16 results of the fp16 inputs (30)
    assert len(RECORDINGS) == 48
    assert sum(len(np.load(p)["d_bits"]) for p in REC.glob("*.npz")) == 32 * 5000


@pytest.mark.parametrize("stem,arr", RECORDINGS)
def test_recording_reproduced_but_pinned_exceptions(stem, arr):
    got, d = replay(stem, arr)
    miss = np.flatnonzero(got != d).tolist()
    assert miss == KNOWN.get(f"{stem}:{arr}", [])
    preset = recording_preset(stem, arr)
    claim = [e for e in EVIDENCE[preset] if e[0] == "recordings" and e[1] == stem and e[2] == arr]
    assert claim and claim[0][3:5] == (len(d) - len(miss), len(d))


def test_hopper_recordings_need_c_zero():
    # their H100/H200 fp32 rows were computed without the recorded C: with it nearly every row misses
    z = np.load(REC / "h200_e4m3.npz")
    got = dot(z["a"], z["b"], z["c_bits"].view(np.float32), instruction="hopper-mma", a_format="e4m3fn")
    assert (got.view(np.uint32) != z["d_bits"]).sum() > 4900


def test_b200_row_3935_values():
    # the one B200 fp32 row no width reproduces (GPU -0x1.1bbef8p+3, nearest float32 of the exact sum
    # -0x1.1bbefap+3)
    got, d = replay("b200_e5m2", "d_bits")
    assert float(d.view(np.float32)[3935]) == float.fromhex("-0x1.1bbef8p+3")
    assert float(got.view(np.float32)[3935]) == float.fromhex("-0x1.1bbefap+3")


@pytest.mark.parametrize("fmt", sorted(FMT))
def test_mmasim_tcgen05_model_disagrees_with_b200_mma_sync(fmt):
    got, d = replay(f"b200_{fmt}", "d_bits", preset="blackwell-tcgen05-f8f6f4")
    ok = int((got == d).sum())
    claim = [e for e in EVIDENCE["blackwell-tcgen05-f8f6f4"] if e[0] == "disagrees" and e[1] == f"b200_{fmt}"]
    assert claim[0][3] == ok < 3300


def test_smallest_b200_disagreement():
    # one product and C: exact 256 + 0.75 * 2**-15 (float32's ulp at 256 is 2**-15); nearest even
    # -> 256 + 2**-15 (the preset the B200 recordings fix), truncation -> 256 (MMA-Sim's tcgen05 model)
    a = fp8emu.encode(np.array([[1.5] + [0.0] * 31]), "e4m3fn")
    b = fp8emu.encode(np.array([[2.0 ** -16]] + [[0.0]] * 31), "e5m2")
    c = np.full((1, 1), 256.0, np.float32)
    kw = dict(a_format="e4m3fn", b_format="e5m2")
    assert float(mma(a, b, c, instruction="blackwell-mma", **kw)[0, 0]) == 256 + 2 ** -15
    assert float(mma(a, b, c, instruction="blackwell-tcgen05-f8f6f4", **kw)[0, 0]) == 256.0


# ----------------------------------------------------------------------------- catalogue and API
def test_presets_list_every_instruction_with_evidence():
    ps = presets()
    assert [p["name"] for p in ps] == list(INSTRUCTIONS)
    for p in ps:
        assert p["evidence"], p["name"]
        assert p["name"] in EVIDENCE
    assert {p["name"] for p in ps if any("MMA-Sim" in e for e in p["evidence"])} == set(mmasim_cases.PRESET_CASES)


def test_mma_tile_equals_rowwise_dot():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (16, 32), dtype=np.uint8)
    b = rng.integers(0, 256, (32, 8), dtype=np.uint8)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = mma(a, b, c, instruction="ada-mma", a_format="e4m3fn")
    rows = dot(np.repeat(a, 8, axis=0), np.tile(b.T, (16, 1)), c.reshape(-1), instruction="ada-mma",
               a_format="e4m3fn")
    np.testing.assert_array_equal(d.reshape(-1).view(np.uint32), rows.view(np.uint32))


def test_ada_mma_is_two_chained_k16_steps():
    # the step widths the issue names (a model of step_row's row) reproduce ada-mma (C = 0) on random finite codes
    rng = np.random.default_rng(5)
    a = rng.integers(0, 126, (64, 32), dtype=np.uint8) | (rng.integers(0, 2, (64, 32), dtype=np.uint8) << 7)
    b = rng.integers(0, 126, (32, 64), dtype=np.uint8)
    acc = fp8emu.GemmModel("widths", "instruction", fp8emu.step_row(16, 13, 14, "rtz"))
    want = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=acc)
    got = mma(a, b, instruction="ada-mma", a_format="e4m3fn")
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_mma_argument_errors():
    a = np.zeros((2, 32), np.uint8)
    b = np.zeros((32, 2), np.uint8)
    with pytest.raises(ValueError, match="unknown instruction"):
        mma(a, b, instruction="volta", a_format="e4m3fn")
    with pytest.raises(ValueError, match="takes e4m3fn, e5m2 operands"):
        mma(a, b, instruction="ada-mma", a_format="e2m1fn")
    with pytest.raises(ValueError, match="multiple of"):
        mma(a[:, :24], b[:24], instruction="hopper-wgmma", a_format="e4m3fn")
    with pytest.raises(ValueError, match="a must be"):
        mma(a, b[:16], instruction="hopper-wgmma", a_format="e4m3fn")
    with pytest.raises(ValueError, match="block-scaled"):
        mma(a, b, instruction="blackwell-tcgen05-mxf8f6f4", a_format="e4m3fn")
    with pytest.raises(ValueError, match="no block scales"):
        mma(a, b, instruction="ada-mma", a_format="e4m3fn", a_scales=np.zeros((2, 1), np.uint8),
            b_scales=np.zeros((1, 2), np.uint8))
    with pytest.raises(ValueError, match="float16 values"):
        mma(a, b, np.full((2, 2), 0.1), instruction="ada-mma-f16", a_format="e4m3fn")
    with pytest.raises(ValueError, match="above e2m1fn's 4 bits"):
        mma(np.full((2, 32), 0x30, np.uint8), b, instruction="rtx-blackwell-mma", a_format="e2m1fn",
            b_format="e4m3fn")
    with pytest.raises(TypeError, match="uint8 codes"):
        mma(a.astype(np.int16), b, instruction="ada-mma", a_format="e4m3fn")
    s = np.full((2, 2), 127, np.uint8)
    with pytest.raises(ValueError, match="blocks of 16, 32"):
        mma(np.zeros((2, 64), np.uint8), np.zeros((64, 2), np.uint8), instruction="blackwell-tcgen05-mxf4nvf4",
            a_format="e2m1fn", a_scales=np.full((2, 1), 127, np.uint8), b_scales=np.full((1, 2), 127, np.uint8))
    with pytest.raises(ValueError, match="takes ue4m3 scales with blocks of 16 along K, got 32"):
        mma(np.zeros((2, 64), np.uint8), np.zeros((64, 2), np.uint8), instruction="blackwell-tcgen05-mxf4nvf4",
            a_format="e2m1fn", a_scales=s, b_scales=s.T, scale_format="ue4m3")
    # scales of the wrong rows or columns (or none) are refused, 2-D as batched (before: taken)
    mx = dict(instruction="blackwell-tcgen05-mxf8f6f4", a_format="e4m3fn")
    one = np.full((2, 1), 127, np.uint8)
    for sa, sb, name in ((np.full((3, 1), 127, np.uint8), one.T, "a_scales"), (np.full((1, 1), 127, np.uint8), one.T, "a_scales"),
                         (one, np.full((1, 3), 127, np.uint8), "b_scales"), (one[:, 0], one.T, "a_scales")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            mma(a, b, a_scales=sa, b_scales=sb, **mx)
    with pytest.raises(ValueError, match="a_scales must be"):
        dot(a, b.T, a_scales=np.full((3, 1), 127, np.uint8), b_scales=one, **mx)
    with pytest.raises(ValueError, match=r"c must be \(2,\)"):
        dot(a, b.T, np.zeros((2, 1), np.float32), instruction="ada-mma", a_format="e4m3fn")
    assert (dot(a, b.T, np.float32(2.0), instruction="ada-mma", a_format="e4m3fn") == 2).all()


@pytest.mark.parametrize("preset, fmt", [("ada-mma", "e4m3fn"), ("cdna3-mfma-fp8", "e4m3fnuz"),
                                         ("blackwell-tcgen05-mxf8f6f4", "e4m3fn"),
                                         ("blackwell-tcgen05-mxf4nvf4", "e2m1fn"), ("volta-mma-f16in", "float16")])
def test_empty_operands(preset, fmt):
    """No rows, columns or tiles: an empty D of the output type (as np.matmul); no step along K: an
    error for one instruction, C (or zeros) for a GEMM, as np.matmul's empty sum."""
    ins = get_instruction(preset)
    k = ins.shape[2]
    dt = np.uint16 if fmt == "float16" else np.uint8

    def scales(a_shape, b_shape):
        if not ins.block_scaled:
            return {}
        return dict(a_scales=np.full(a_shape[:-1] + (a_shape[-1] // 32,), 127, np.uint8),
                    b_scales=np.full(b_shape[:-2] + (b_shape[-2] // 32, b_shape[-1]), 127, np.uint8))

    out = np.float16 if ins.out == "float16" else np.float32
    for a_shape, b_shape, d_shape in [((0, k), (k, 8), (0, 8)), ((16, k), (k, 0), (16, 0)),
                                      ((0, 16, k), (0, k, 8), (0, 16, 8)), ((2, 0, 16, k), (2, 0, k, 8), (2, 0, 16, 8)),
                                      ((3, 16, k), (k, 0), (3, 16, 0))]:
        d = mma(np.zeros(a_shape, dt), np.zeros(b_shape, dt), instruction=preset, a_format=fmt,
                **scales(a_shape, b_shape))
        assert d.shape == d_shape and d.dtype == out
    assert dot(np.zeros((0, k), dt), np.zeros((0, k), dt), instruction=preset, a_format=fmt,
               **({} if not ins.block_scaled else dict(a_scales=np.zeros((0, k // 32), np.uint8),
                                                       b_scales=np.zeros((0, k // 32), np.uint8)))).shape == (0,)
    with pytest.raises(ValueError, match="K = 0 must be a positive multiple"):
        mma(np.zeros((4, 0), dt), np.zeros((0, 8), dt), instruction=preset, a_format=fmt, **scales((4, 0), (0, 8)))
    if ins.out == "float32" and fmt != "float16":
        c = np.arange(32, dtype=np.float32).reshape(4, 8) - 7.5
        if ins.block_scaled:
            a, b = fp8emu.quantize_mx(np.ones((4, 0)), fmt), fp8emu.quantize_mx(np.ones((0, 8)), fmt, axis=0)
            d = fp8emu.gemm.block_scaled_mm(a, b, accumulator=preset, c=c)
            assert d.dtype == np.float32 and (d == c).all()
        else:
            a, b = np.zeros((4, 0), dt), np.zeros((0, 8), dt)
            for acc in (preset, "hopper"):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")            # no 'mean of empty slice' on the way
                    d = fp8emu.gemm.scaled_mm(a, b, a_format=fmt, b_format=fmt, accumulator=acc)
                assert d.shape == (4, 8) and d.dtype == np.float32 and (d == 0).all() and not np.signbit(d).any()
            d = ins_mod.gemm(a, b, instruction=preset, a_format=fmt, b_format=fmt, c=c)
            assert (d == c).all() and d is not c


def test_mma_leaves_inputs_unchanged():
    a = np.arange(64, dtype=np.uint8).reshape(2, 32)
    b = a.T.copy()
    c = np.ones((2, 2), np.float32)
    a0, b0, c0 = a.copy(), b.copy(), c.copy()
    mma(a, b, c, instruction="cdna3-mfma-fp8", a_format="e4m3fnuz")
    assert (a == a0).all() and (b == b0).all() and (c == c0).all()


def test_instruction_description_errors():
    base = get_instruction("ada-mma")
    import dataclasses
    with pytest.raises(ValueError, match="datapath"):
        dataclasses.replace(base, datapath="systolic")
    with pytest.raises(ValueError, match="rounding"):
        dataclasses.replace(base, rounding="rna")
    with pytest.raises(ValueError, match="float32 output"):
        dataclasses.replace(base, out="float16")
    with pytest.raises(ValueError, match="multiple of its step"):
        dataclasses.replace(base, step=24)
    with pytest.raises(ValueError, match="block scales go with"):
        dataclasses.replace(base, scales=("ue8m0",))
    assert isinstance(base, Instruction) and not base.block_scaled
    assert get_instruction(base) is base


# ----------------------------------------------------------------------------- GEMM entry points
def _codes(rng, shape, fmt):
    return fp8emu.encode(rng.standard_normal(shape) * 4, fmt)


def test_scaled_mm_through_an_instruction_is_its_chain_along_k():
    rng = np.random.default_rng(11)
    a, b = _codes(rng, (8, 96), "e4m3fn"), _codes(rng, (96, 4), "e5m2")
    for name in ("ada-mma", "hopper-wgmma", "blackwell-mma", "rtx-blackwell-mma"):
        want = mma(a, b, instruction=name, a_format="e4m3fn", b_format="e5m2")
        got = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e5m2", accumulator=name)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        # scalar scales: fl32(acc * fl32(sa * sb)), as the other accumulators
        s = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e5m2", accumulator=name, scale_a=0.375,
                             scale_b=3.0)
        np.testing.assert_array_equal(s, (want * np.float32(1.125)).astype(np.float32))
    # K padded with zero codes to whole steps
    got = fp8emu.scaled_mm(a[:, :80], b[:80], a_format="e4m3fn", b_format="e5m2", accumulator="hopper-wgmma")
    want = mma(np.pad(a[:, :80], ((0, 0), (0, 16))), np.pad(b[:80], ((0, 16), (0, 0))), instruction="hopper-wgmma",
               a_format="e4m3fn", b_format="e5m2")
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="float32-output"):
        fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e5m2", accumulator="ada-mma-f16")
    with pytest.raises(ValueError, match="takes e4m3fnuz, e5m2fnuz operands, not a_format='e4m3fn'"):
        fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e5m2", accumulator="cdna3-mfma-fp8")


def test_hopper_fast_equals_the_wgmma_chain_on_finite_data():
    # two descriptions of one datapath: the hopper-fast model and MMA-Sim's wgmma model
    rng = np.random.default_rng(12)
    a, b = _codes(rng, (16, 256), "e4m3fn"), _codes(rng, (256, 16), "e4m3fn")
    x = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper-fast")
    y = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper-wgmma")
    np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


def test_block_scaled_mm_through_block_scaled_instructions():
    rng = np.random.default_rng(13)
    x, y = rng.standard_normal((4, 64)) * 8, rng.standard_normal((64, 3))
    c = rng.standard_normal((4, 3)).astype(np.float32)
    qa, qb = fp8emu.quantize_mx(x, "e4m3fn"), fp8emu.quantize_mx(y, "e2m3fn", axis=0)
    got = fp8emu.gemm.block_scaled_mm(qa, qb, accumulator="blackwell-tcgen05-mxf8f6f4", c=c)
    want = mma(qa.codes, qb.codes, c, instruction="blackwell-tcgen05-mxf8f6f4", a_format="e4m3fn",
               b_format="e2m3fn", a_scales=qa.scale_codes, b_scales=qb.scale_codes)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    na, nb = fp8emu.quantize_nvfp4(x), fp8emu.quantize_nvfp4(y, axis=0)
    got = fp8emu.gemm.block_scaled_mm(na, nb, accumulator="rtx-blackwell-mma-mxf4nvf4")
    raw = mma(na.codes, nb.codes, instruction="rtx-blackwell-mma-mxf4nvf4", a_format="e2m1fn",
              a_scales=na.block_scale_codes, b_scales=nb.block_scale_codes, scale_format="ue4m3")
    alpha = fp8emu.gemm.nvfp4_alpha(na.global_amax, nb.global_amax)
    np.testing.assert_array_equal(got, (raw * alpha).astype(np.float32))
    with pytest.raises(ValueError, match="takes no block scales"):
        fp8emu.gemm.block_scaled_mm(qa, qb, accumulator="blackwell-mma")


def test_scaled_mm_block_scales_through_an_instruction():
    # 1x128 block scales: each 128-wide K block is the instruction's chain from zero, joined to the
    # float32 total with one rounding (total + part * fl32(sa * sb)), blocks in K order
    from fractions import Fraction
    from oracle import round_f32
    rng = np.random.default_rng(21)
    a, b = _codes(rng, (3, 256), "e4m3fn"), _codes(rng, (256, 2), "e4m3fn")
    sa = rng.uniform(0.5, 2, (3, 2)).astype(np.float32)
    sb = rng.uniform(0.5, 2, (2, 2)).astype(np.float32)
    got = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="ada-mma", scale_a=sa,
                           scale_b=sb)
    for m in range(3):
        for n in range(2):
            total = Fraction(0)
            for kb in range(2):
                sl = slice(128 * kb, 128 * (kb + 1))
                part = mma(a[m:m + 1, sl], b[sl, n:n + 1], instruction="ada-mma", a_format="e4m3fn")[0, 0]
                f = Fraction(round_f32(Fraction(float(sa[m, kb])) * Fraction(float(sb[kb, n]))))
                total = Fraction(round_f32(total + Fraction(float(part)) * f))
            assert float(got[m, n]) == float(total)


def test_sixteen_bit_inputs():
    # bit patterns in, as the instruction reads them: float16 and bfloat16 uint16 patterns, tf32 as float32
    # words whose low 13 bits do not count
    a = np.array([[1.5, -2.0, 0.25, 3.0]], np.float32)
    b = np.array([[2.0, 0.5, 4.0, 1.0]], np.float32)
    want = float(np.dot(a[0].astype(np.float64), b[0]))
    h = dot(a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16), instruction="volta-mma-f16in",
            a_format="float16")
    a8, b8 = np.pad(a, ((0, 0), (0, 4))), np.pad(b, ((0, 0), (0, 4)))     # bf16 steps are 8 long
    bf = dot((a8.view(np.uint32) >> 16).astype(np.uint16), (b8.view(np.uint32) >> 16).astype(np.uint16),
             instruction="ampere-mma-bf16in", a_format="bfloat16")
    noisy = a.view(np.uint32) | np.uint32(0x1FFF)          # low 13 bits set: ignored
    t = dot(noisy, b.view(np.uint32), instruction="hopper-mma-tf32in", a_format="tf32")
    assert float(h[0]) == float(bf[0]) == float(t[0]) == want
    with pytest.raises(TypeError, match="float16 must be uint16 bit patterns"):
        dot(a, b, instruction="volta-mma-f16in", a_format="float16")
    with pytest.raises(ValueError, match="takes float16 operands, not a_format='bfloat16'"):
        dot(a.view(np.uint32)[:, :4].astype(np.uint16), b.astype(np.float16).view(np.uint16),
            instruction="volta-mma-f16in", a_format="bfloat16")
