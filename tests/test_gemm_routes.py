"""One differential harness for the GEMM routes: every fast route that applies to a preset gives the
bits of the reference steps (fp8emu.gemm.datapaths.reference) on random and adversarial tiles.

The reference states what each datapath computes and is itself held to MMA-Sim and to GPU
recordings by tests/test_instructions.py; here every route of fp8emu.gemm.routes (code-pair
tables on rows and on tiles, the operand route on single tiles and on batches, the exact GEMM
route, the group route) and the dispatcher behind ``mma`` are run on the same inputs for every
preset of the catalogue and compared bit for bit.  Tiles: codes over the whole code range (NaN
and Inf codes included), Gaussian data, zero rows / columns / steps, subnormals, cancelling pairs,
the largest and smallest magnitudes side by side; C of +0, -0, subnormals, normal values, huge
values, and Inf / NaN.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import code_tables, datapaths, instruction_inputs, instructions, models, routes
from fp8emu.gemm.catalogue import INSTRUCTIONS
from fp8emu.gemm.routes import exact as exact_mod, groups as groups_mod, operands as operands_mod
from fp8emu.gemm.routes import tables as tables_mod, wide as wide_mod

WIDE = ("float16", "bfloat16", "tf32")
#: Rows of step widths no preset has (results rounded to any width, "rz-e8mN" / "rne-e8mN"), as
#: fp8emu.gemm.models.step_row builds them for those widths.
WIDTH_ROWS = {f"widths-{g}-{f}-{r}": dataclasses.replace(INSTRUCTIONS["hopper-wgmma"], name=f"widths-{g}-{f}-{r}",
                                                        shape=(64, 8, g), step=g, frac_bits=f, rounding=r)
              for g, f, r in [(8, 20, "rne-e8m21"), (64, 6, "rz-e8m5"), (16, 40, "rne-e8m9"), (32, 13, "rne-e8m1")]}
ROWS = {**INSTRUCTIONS, **WIDTH_ROWS}
CODE_PRESETS = sorted(n for n, i in INSTRUCTIONS.items() if i.formats[0] not in WIDE) + list(WIDTH_ROWS)
WIDE_PRESETS = sorted(n for n, i in INSTRUCTIONS.items() if i.formats[0] in WIDE)
M, N, T = 12, 10, 3
TILES = ("codes", "gaussian", "zeros", "subnormals", "cancel", "spread")


def _bits(d):
    return np.ascontiguousarray(d).view(np.uint32 if d.dtype == np.float32 else np.uint16)


def _values(fmt):
    return fp8emu.decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)


def _codes(rng, fmt, kind, shape):
    """Codes (..., rows, K) of one kind of tile (K along the last axis)."""
    v = _values(fmt)
    finite = np.flatnonzero(np.isfinite(v))
    if kind == "codes":                                     # every code, NaN and Inf included
        return rng.integers(0, 1 << fmt.bits, shape, dtype=np.uint8)
    if kind == "gaussian":
        return fp8emu.encode(rng.standard_normal(shape), fmt)
    x = rng.choice(finite, shape).astype(np.uint8)
    if kind == "zeros":                                     # zero rows, and zero runs along K
        zero = np.uint8(np.flatnonzero(v == 0)[0])
        x[..., 1, :] = zero
        x[..., :, : shape[-1] // 3] = zero
        return x
    if kind == "subnormals":
        sub = np.flatnonzero(np.isfinite(v) & (v != 0) & (np.abs(v) < fmt.min_normal))
        return rng.choice(sub, shape).astype(np.uint8) if sub.size else x
    if kind == "cancel":                                    # pairs of equal codes along K
        x[..., 1::2] = x[..., 0::2]
        return x
    mag = np.abs(v[finite])
    big = np.flatnonzero(np.abs(v) == mag.max())
    small = np.flatnonzero(np.abs(v) == mag[mag != 0].min())
    return np.where(rng.random(shape) < 0.5, rng.choice(big, shape), rng.choice(small, shape)).astype(np.uint8)


def _negate_odd(fmt, b):
    """B with the sign of its odd non-zero elements along K flipped, so that pairs of products cancel."""
    b = b.copy()
    odd = b[..., 1::2]
    nonzero = _values(fmt)[odd] != 0
    odd[nonzero] ^= np.uint8(1 << (fmt.bits - 1))
    return b


def _c(rng, ins, shape, specials):
    """C of the instruction's output type: +0, -0, subnormals, normal values, huge values (and, with
    ``specials``, Inf and NaN)."""
    dt = np.float32 if ins.out == "float32" else np.float16
    tiny = np.finfo(dt).smallest_subnormal
    choices = [0.0, -0.0, float(tiny), -3.0 * float(tiny), 1.5, -0.375, 2.0 ** (26 if dt == np.float32 else 14)]
    if specials:
        choices += [np.inf, -np.inf, np.nan]
    c = rng.choice(np.array(choices), shape) * np.where(rng.random(shape) < 0.5, 1.0, rng.standard_normal(shape))
    with np.errstate(invalid="ignore", over="ignore"):
        return c.astype(dt)


def _scale_codes(rng, kind, shape, extremes):
    """Scale codes: ue8m0 moderate (2**-9 ... 2**9), with ``extremes`` also 2**-127, 2**-126, 2**127
    and NaN; ue4m3 every code (zero, subnormals and NaN included); ue5m3 every code (zero, the
    subnormals 2**-17 ..., 114688 and NaN included)."""
    if kind == "ue8m0":
        s = rng.integers(118, 137, shape, dtype=np.uint8)
        odd = rng.random(shape) < (0.08 if extremes else 0)
        s[odd] = rng.choice(np.array([0, 1, 254, 255], np.uint8), int(odd.sum()))
        return s
    return rng.integers(0, 256 if kind == "ue5m3" else 128, shape, dtype=np.uint8)


def _cases(preset):
    """(format pair, tile kind, scale kind, block) of a preset."""
    ins = ROWS[preset]
    f = ins.formats
    pairs = sorted({(f[0], f[0]), (f[-1], f[0]), (f[min(1, len(f) - 1)], f[-1])})
    scales = list(ins.scale_modes) or [(None, None)]
    return [(fa, fb, kind, sk, blk) for fa, fb in pairs for kind in TILES for sk, blk in scales]


def _tile(preset, fa, fb, kind, sk, blk):
    ins = ROWS[preset]
    rng = np.random.default_rng(zlib.crc32(f"{preset}{fa}{fb}{kind}{sk}{blk}".encode()))
    ga, gb = fp8emu.get_format(fa), fp8emu.get_format(fb)
    K = 3 * ins.step
    a = _codes(rng, ga, kind, (T, M, K))
    b = _codes(rng, gb, kind, (T, N, K))                       # (T, N, K): B transposed, as the routes take it
    if kind == "cancel":
        b = _negate_odd(gb, b)
    c = _c(rng, ins, (T, M, N), specials=kind == "codes")
    sa = sb = None
    if sk:
        extremes = kind not in ("gaussian", "cancel")
        sa, sb = (_scale_codes(rng, sk, (T, r, K // blk), extremes) for r in (M, N))
    return ins, ga, gb, a, b, c, sa, sb


def _reference(ins, a, b, c, fa, fb, sa, sb, sk):
    """The reference steps on one tile (a (M, K), b (N, K))."""
    return datapaths.reference(ins, a[:, None], b[None], c, fa, fb, None if sa is None else sa[:, None],
                               None if sb is None else sb[None], sk)


def _tile_scales(ins, a, b, fa, fb, sa, sb, sk):
    """The decoded scales as the tile routes take them, from the same check as ``mma``."""
    dsa, dsb, block = instruction_inputs.check_inputs(ins, a.shape[-1], fa, fb, None if sa is None else sa[:, None],
                                                     None if sb is None else sb[None], sk)
    if dsa is None:
        return dsa, dsb, block, None
    return dsa, dsb, block, (dsa, (dsb[0].swapaxes(1, 2), dsb[1].swapaxes(1, 2)), block)


def _batch_scales(sa, sb, sk):
    """Decoded scales of a batch of tiles, (K / block, rows, T), as the routes take them."""
    if sa is None:
        return None
    da, db = (instruction_inputs.decode_scales(np.ascontiguousarray(np.transpose(s, (2, 1, 0))), sk, "s")
              for s in (sa, sb))
    return da, db, None


@pytest.mark.parametrize("preset", CODE_PRESETS)
def test_every_route_gives_the_reference_bits(preset, monkeypatch):
    monkeypatch.setattr(exact_mod, "_EXACT_MIN", 1)         # the exact route on tiles this small
    taken = {"exact": 0, "operands": 0, "groups": 0}
    for fa, fb, kind, sk, blk in _cases(preset):
        ins, ga, gb, a, b, c, sa, sb = _tile(preset, fa, fb, kind, sk, blk)
        K = a.shape[-1]
        where = f"{preset} {fa} x {fb}, {kind}, scales {sk} / {blk}"
        refs = [_reference(ins, a[t], b[t], c[t], fa, fb, None if sa is None else sa[t],
                           None if sb is None else sb[t], sk) for t in range(T)]
        route = routes.tile_route(ins, ga, gb, blk)
        for t in range(T):
            at, bt, ct = a[t], b[t], c[t]
            st = (None, None) if sa is None else (sa[t], sb[t])
            dsa, dsb, block, scl = _tile_scales(ins, at, bt, fa, fb, *st, sk)
            got = {"tables (tile)": tables_mod.run_tables(ins, at[:, None], bt[None], ct, ga, gb, dsa, dsb, block, K),
                   "mma": instructions.mma(at, bt.T, ct, instruction=ins, a_format=fa, b_format=fb,
                                           a_scales=st[0], b_scales=None if st[1] is None else st[1].T,
                                           scale_format=sk)}
            if route is routes.run_tiles:
                got["operands"] = operands_mod.run_operands(ins, at[None], bt[None], ct[None], ga, gb, scl)[0]
                got["tiles"] = routes.run_tiles(ins, at[None], bt[None], ct[None], ga, gb, scl)[0]
                taken["operands"] += 1
                d = exact_mod.run_exact(ins, at, bt, ct, ga, gb, scl)
                if d is not None:
                    got["exact"] = d
                    taken["exact"] += 1
            elif route is routes.run_groups:
                got["groups"] = groups_mod.run_groups(ins, at[None], bt[None], ct[None], ga, gb, scl)[0]
                taken["groups"] += 1
            for name, d in got.items():
                assert d.dtype == refs[t].dtype, (where, name)
                diff = np.flatnonzero(_bits(d) != _bits(refs[t]))
                assert diff.size == 0, f"{where}, tile {t}, route {name}: {diff.size} outputs differ, first {diff[:5]}"
        # the batch of tiles at once (the routes' tiles innermost), and the tables on rows (dot's form)
        want = np.stack(refs)
        if route is not None:
            scl = _batch_scales(sa, sb, sk)
            scl = None if scl is None else (scl[0], scl[1], blk)
            d = route(ins, a, b, c, ga, gb, scl)
            assert (_bits(d) == _bits(want)).all(), f"{where}: the batch through {route.__name__}"
        rows_a, rows_b = np.repeat(a, N, axis=1).reshape(-1, 1, K), np.tile(b, (1, M, 1)).reshape(-1, 1, K)
        rsa = rsb = None
        if sa is not None:
            rsa = np.repeat(sa, N, axis=1).reshape(-1, 1, K // blk)
            rsb = np.tile(sb, (1, M, 1)).reshape(-1, 1, K // blk)
        dsa, dsb, block = instruction_inputs.check_inputs(ins, K, fa, fb, rsa, rsb, sk)
        d = tables_mod.run_tables(ins, rows_a, rows_b, c.reshape(-1, 1), ga, gb, dsa, dsb, block, K)
        assert (_bits(d.reshape(want.shape)) == _bits(want)).all(), f"{where}: rows through the tables"
    # each route the catalogue sends this preset to was run
    ins = ROWS[preset]
    if ins.datapath in ("fused", "paired") or (ins.datapath == "scaled" and ins.blocks[0] % ins.step == 0):
        assert taken["operands"], preset
    if ins.datapath == "grouped":
        assert taken["groups"], preset
    if ins.out == "float32" and ins.datapath != "grouped":      # the exact route took some tiles
        assert taken["exact"], preset


@pytest.mark.parametrize("preset", WIDE_PRESETS)
def test_no_fast_route_serves_the_16_bit_inputs(preset):
    """The 16-bit inputs have no fast route: mma is the reference itself (checked on one tile)."""
    ins = INSTRUCTIONS[preset]
    rng = np.random.default_rng(zlib.crc32(preset.encode()))
    K = 2 * ins.step
    fmt = ins.formats[0]
    if fmt == "tf32":
        a = rng.standard_normal((M, K)).astype(np.float32).view(np.uint32)
        b = rng.standard_normal((N, K)).astype(np.float32).view(np.uint32)
    else:
        dt = np.float16 if fmt == "float16" else np.float32
        a, b = (rng.standard_normal(s).astype(dt) for s in ((M, K), (N, K)))
        if fmt == "bfloat16":
            a, b = ((x.view(np.uint32) >> np.uint32(16)).astype(np.uint16) for x in (a, b))
        else:
            a, b = a.view(np.uint16), b.view(np.uint16)
    c = _c(rng, ins, (M, N), specials=False)
    want = _reference(ins, a, b, c, fmt, fmt, None, None, None)
    got = instructions.mma(a, b.T, c, instruction=ins, a_format=fmt)
    assert (_bits(got) == _bits(want)).all()


def test_every_cached_table_is_read_only():
    """The datapaths and routes cache their decode tables: a caller that wrote into one would change
    every later GEMM's bits, so each cached array is read-only (instruction mutation sample seed 43: the
    pair tables' flag could be dropped without a test noticing)."""
    from fp8emu.formats import get_format
    from fp8emu.gemm import code_tables
    from fp8emu.gemm.routes import codes as codes_mod
    from fp8emu.gemm.routes.codes import _operand_pair_tables, operand_tables
    for name in ("e4m3fn", "e5m2"):
        fmt = get_format(name)
        for arr in (*_operand_pair_tables(fmt), *operand_tables(fmt, np.float32)[:2]):
            assert not arr.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                arr[0] = 0
    caches = (code_tables._DATAPATH, codes_mod._TABLES, codes_mod._PAIRS, instruction_inputs._SCALES,
              exact_mod._POWERS)
    arrays = [a for cache in caches for v in cache.values() for a in (v if isinstance(v, tuple) else (v,))
              if isinstance(a, np.ndarray)]
    assert arrays and not any(a.flags.writeable for a in arrays)


#: Rows of unbounded exponents (float64 results) as the block-scaled models and the step widths no
#: instruction has run them (fp8emu.gemm.models): "scaled" with a scale type and block per operand.
WIDE_ROWS = {"blackwell-scaled": models.scaled_row(INSTRUCTIONS["blackwell-mma"], formats=("e4m3fn", "e5m2", "e2m1fn")),
             "f25-scaled": models.scaled_row(models.step_row(64, 25, 24, "rtz"), formats=("e4m3fn", "e5m2", "e2m1fn")),
             "narrow-scaled": models.scaled_row(models.step_row(16, 12, 13, "rtz"), formats=("e4m3fn", "e5m2", "e2m1fn")),
             "hopper-wide": models.wide_row(INSTRUCTIONS["hopper-wgmma"], formats=("e4m3fn", "e5m2", "e2m1fn")),
             "wide-40": models.step_row(32, 40, 30, "rne")}


@pytest.mark.parametrize("name", list(WIDE_ROWS))
def test_the_wide_route_gives_the_reference_bits(name):
    """The wide route (scaled operands, unbounded exponents) against the reference steps: mixed
    element formats, scale types (E8M0 x UE4M3, UE5M3) and blocks (32 x 16), zero and subnormal scales,
    subnormal and zero codes, cancelling tiles, C given or not."""
    ins = WIDE_ROWS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    K = 128
    for trial, (fa, fb) in enumerate([("e4m3fn", "e5m2"), ("e2m1fn", "e4m3fn"), ("e5m2", "e5m2")]):
        fa_, fb_ = fp8emu.get_format(fa), fp8emu.get_format(fb)
        if fa not in ins.formats or fb not in ins.formats:
            ins = dataclasses.replace(ins, formats=tuple(dict.fromkeys(ins.formats + (fa, fb))))
        kind = TILES[trial % len(TILES)] if trial else "subnormals"
        a = _codes(rng, fa_, kind, (M, K))
        b = _codes(rng, fb_, "cancel" if trial == 1 else "gaussian", (N, K))
        a[np.isnan(_values(fa_)[a]) | np.isinf(_values(fa_)[a])] = 0     # the route takes finite codes
        b[np.isnan(_values(fb_)[b]) | np.isinf(_values(fb_)[b])] = 0
        c = np.zeros((M, N), np.float32) if trial != 1 else (rng.standard_normal((M, N)) * 2.0 ** -4).astype(np.float32)
        if ins.datapath == "scaled":
            kinds, blocks = [("ue8m0", "ue4m3"), ("ue4m3", "ue5m3"), ("ue8m0", "ue8m0")][trial], [(32, 16), (16, 16), (16, 32)][trial]
            sc = []
            for kd, blk, rows in zip(kinds, blocks, (M, N)):
                lo, hi = {"ue8m0": (100, 150), "ue4m3": (0, 0x7F), "ue5m3": (0, 0xFE)}[kd]
                sc.append(rng.integers(lo, hi, (rows, K // blk)).astype(np.uint8))
                sc[-1][0, 0] = 0 if kd != "ue8m0" else 1     # a zero scale (or the smallest E8M0)
            ref = datapaths.reference(ins, a[:, None], b[None], c.astype(np.float64), fa, fb, sc[0][:, None], sc[1][None],
                                      kinds)
            ops = []
            for codes, fmt, s, kd, blk in zip((a, b), (fa_, fb_), sc, kinds, blocks):
                vals = instruction_inputs.decode_scales(s, kd, "s", unbounded=True)[0]
                ops.append(wide_mod.scaled_operand(codes, fmt, vals, blk))
            (va, ea, la), (vb, eb, lb) = ops
        else:
            ref = datapaths.reference(ins, a[:, None], b[None], c.astype(np.float64), fa, fb)
            va, ea, la = code_tables.values_and_exponents(a, fa_, lows=True)
            vb, eb, lb = code_tables.values_and_exponents(b, fb_, lows=True)
        for path in (None, "dense", "fallback"):
            wide_mod._PATH = path
            try:
                got = wide_mod.run_wide(ins, va, ea, vb.T, eb.T, c=None if trial != 1 else c, lows=(la, lb.T))
            finally:
                wide_mod._PATH = None
            assert got.dtype == ref.dtype == np.float64
            assert np.array_equal(got.view(np.uint64), ref.view(np.uint64)), (name, trial, path)


def test_the_wide_routes_float32_dense_step_keeps_the_reference_bits(monkeypatch):
    # the dense step sums in float32 where the operands' exponents lie within +-50 and C below 2**100
    # (wide.run_wide): E8M0 scales that put the exponents on both sides of that bound and beyond float32,
    # a C near 2**100, and a step whose truncated sums reach 2**24 (F + 4 + log2(step) = 24)
    took = set()
    dense = wide_mod._dense_step
    monkeypatch.setattr(wide_mod, "_dense_step", lambda *a: took.add(a[-1]) or dense(*a))
    monkeypatch.setattr(wide_mod, "_PATH", "dense")
    rng = np.random.default_rng(52)
    f = fp8emu.get_format("e4m3fn")
    K = 96
    for i, (row, lo, hi, c_exp) in enumerate([((32, 15, 16, "rne"), 120, 135, 0), ((32, 15, 16, "rne"), 160, 169, 98),
                                              ((16, 13, 14, "rtz"), 160, 172, 0), ((8, 12, 13, "rne"), 80, 90, 102),
                                              ((16, 13, 14, "rtz"), 190, 200, 0)]):
        ins = models.scaled_row(models.step_row(*row), formats=("e4m3fn",))
        a, b = _codes(rng, f, "subnormals" if i % 2 else "gaussian", (M, K)), _codes(rng, f, "cancel", (N, K))
        a[~np.isfinite(_values(f)[a])], b[~np.isfinite(_values(f)[b])] = 0, 0
        sc = [rng.integers(lo, hi, (r, K // 32)).astype(np.uint8) for r in (M, N)]
        c = (rng.standard_normal((M, N)) * 2.0 ** c_exp).astype(np.float32)
        ref = datapaths.reference(ins, a[:, None], b[None], c.astype(np.float64), "e4m3fn", "e4m3fn",
                                  sc[0][:, None], sc[1][None], ("ue8m0", "ue8m0"))
        (va, ea, la), (vb, eb, lb) = (wide_mod.scaled_operand(x, f, instruction_inputs.decode_scales(
            s, "ue8m0", "s", unbounded=True)[0], 32) for x, s in zip((a, b), sc))
        got = wide_mod.run_wide(ins, va, ea, vb.T, eb.T, c=c, lows=(la, lb.T))
        assert np.array_equal(got.view(np.uint64), ref.view(np.uint64)), (row, lo, hi, c_exp)
    assert took == {False, True}          # both sides of the bound were taken


def test_float64_rows_take_the_wide_route_where_it_serves_them():
    # instructions.gemm of a float64 "fused" row: the wide route where its codes are finite and its zero
    # terms never set the alignment, the reference steps elsewhere; the same bits either way
    rng = np.random.default_rng(8)
    f = fp8emu.get_format("e5m2")
    a, b = _codes(rng, f, "subnormals", (16, 96)), _codes(rng, f, "codes", (8, 96))
    row = models.wide_row(INSTRUCTIONS["hopper-wgmma"], formats=("e5m2",))
    late_zero = dataclasses.replace(row, zero_exp=-133)       # a zero term can set the alignment
    assert wide_mod.serves(row) and not wide_mod.serves(late_zero)
    with pytest.raises(ValueError, match="zero_exp <= -600"):
        wide_mod.run_wide(late_zero, *code_tables.values_and_exponents(a, f), *code_tables.values_and_exponents(b.T, f))
    for ins in (row, late_zero):
        for bb in (b, np.where(np.isfinite(_values(f)[b]), b, 0).astype(np.uint8)):     # Inf/NaN codes, none
            ref = datapaths.reference(ins, a[:, None], bb[None], np.zeros((16, 8)), "e5m2", "e5m2")
            wide_mod.COUNTERS.update(dict.fromkeys(wide_mod.COUNTERS, 0))
            got = instructions.gemm(a, bb.T, instruction=ins, a_format="e5m2", b_format="e5m2")
            assert np.array_equal(got.view(np.uint64), ref.view(np.uint64))
            took = sum(wide_mod.COUNTERS.values()) > 0
            assert took == (ins is row and bb is not b), (ins.zero_exp, took)
