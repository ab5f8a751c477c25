"""IEEE P3109 semantics (overflow modes, unsigned formats) and the stochastic-rounding variants, vs gfloat."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gfloat import round_ndarray
from gfloat.formats import format_info_ocp_e4m3, format_info_ocp_e5m2, format_info_p3109
from gfloat.types import RoundMode, Signedness

import fp8emu
from fp8emu.formats import p3109_format

MODES = {"rne": RoundMode.TiesToEven, "rna": RoundMode.TiesToAway, "rtz": RoundMode.TowardZero,
         "rup": RoundMode.TowardPositive, "rdn": RoundMode.TowardNegative}


def test_round_to_odd_overflows_to_inf_in_p3109_only():
    assert fp8emu.encode(224.1, "binary8p4", rounding="rto") == 0x7F          # +Inf
    assert fp8emu.encode(-224.1, "binary8p4", rounding="rto") == 0xFF         # -Inf
    assert fp8emu.encode(224.1, "binary8p4", rounding="rto", saturate=True) == 0x7E
    assert fp8emu.encode(224.0, "binary8p4", rounding="rto") == 0x7E          # exact max stays
    # OCP formats keep their documented behaviour: round to odd overflows to max
    assert fp8emu.encode(500.0, "e4m3fn", rounding="rto") == 0x7E
    assert fp8emu.encode(1e6, "e5m2", rounding="rto") == 0x7B


def _values(rng, fmt, signed=True):
    mx = fmt.max
    v = np.concatenate([
        np.exp(rng.uniform(np.log(fmt.min_subnormal) - 2, np.log(mx) + 1, 3000)),
        fmt.values()[np.isfinite(fmt.values())] * (1 + rng.uniform(-1e-3, 1e-3)),
        [0.0, mx, mx * 1.01, mx * 4, np.inf],
    ])
    v = v[~np.isnan(v)]
    if signed:
        v = np.concatenate([v, -v])
    return v


def _ps(ps, default):
    """Precisions to run; the others only with -m exhaustive."""
    return [p if p in default else pytest.param(p, marks=pytest.mark.exhaustive) for p in ps]


@pytest.mark.parametrize("p", _ps(range(1, 8), (1, 4)))
@pytest.mark.parametrize("sat", [False, True])
def test_signed_p3109_matches_gfloat(p, sat):
    fmt = fp8emu.get_format(f"binary8p{p}")
    fi = format_info_p3109(8, p)
    v = _values(np.random.default_rng(p), fmt)
    for name, mode in MODES.items():
        want = round_ndarray(fi, v, mode, sat)
        got = fp8emu.decode(fp8emu.encode(v, fmt, rounding=name, saturate=sat), fmt, dtype=np.float64)
        assert np.array_equal(got, want, equal_nan=True), (p, name, sat)


@pytest.mark.parametrize("p", _ps(range(1, 9), (3, 8)))
@pytest.mark.parametrize("sat", [False, True])
def test_unsigned_p3109_matches_gfloat(p, sat):
    fmt = p3109_format(p, signed=False)
    fi = format_info_p3109(8, p, Signedness.Unsigned)
    v = _values(np.random.default_rng(10 + p), fmt, signed=False)
    for name, mode in MODES.items():
        want = round_ndarray(fi, v, mode, sat)
        got = fp8emu.decode(fp8emu.encode(v, fmt, rounding=name, saturate=sat), fmt, dtype=np.float64)
        assert np.array_equal(got, want, equal_nan=True), (p, name, sat)
    assert fp8emu.encode(-1.0, fmt) == 0xFF            # negative inputs: NaN


def test_saturation_modes():
    fmt = "binary8p4"
    x = np.array([np.inf, -np.inf, 1e9, -1e9, 1.0, np.nan])
    enc = {m: fp8emu.encode(x, fmt, saturate=m).tolist() for m in ("satfinite", "satpropagate", "ovfinf")}
    assert enc["satfinite"] == fp8emu.encode(x, fmt, saturate=True).tolist() == [0x7E, 0xFE, 0x7E, 0xFE, 0x40, 0x80]
    assert enc["ovfinf"] == fp8emu.encode(x, fmt, saturate=False).tolist() == [0x7F, 0xFF, 0x7F, 0xFF, 0x40, 0x80]
    assert enc["satpropagate"] == [0x7F, 0xFF, 0x7E, 0xFE, 0x40, 0x80]
    with pytest.raises(TypeError, match="satpropagate"):
        fp8emu.encode(1.0, fmt, saturate="yes")


@pytest.mark.parametrize("src", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rto", "stochastic"])
@pytest.mark.parametrize("fmt", ["binary8p4", "binary8p3", "e5m2", "e4m3fn"])
def test_satpropagate_is_satfinite_for_finite_inputs_and_ovfinf_for_inf(src, rounding, fmt):
    # P3109: saturate-propagate saturates finite overflows and keeps Inf.  Every bit pattern of
    # 16-bit sources, a spread of wide ones; both table-driven and exact paths (big and small calls).
    import ml_dtypes
    dt = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}[src]
    if np.dtype(dt).itemsize == 2:
        x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)
    else:
        x = np.random.default_rng(3).standard_normal(1 << 17).astype(dt) * np.asarray(2.0 ** 20, dt)
        x[:4] = [np.inf, -np.inf, np.nan, 0]
    small = np.concatenate([x[:98], x[np.isinf(x.astype(np.float32))]])   # below the table threshold
    for part in (x, small):
        inf = np.isinf(part.astype(np.float32))
        opts = dict(rounding=rounding)
        if rounding == "stochastic":
            opts.update(random_bits=np.arange(part.size, dtype=np.uint64) % 8, sr_bits=3)
        sp = fp8emu.encode(part, fmt, saturate="satpropagate", **opts)
        sf = fp8emu.encode(part, fmt, saturate="satfinite", **opts)
        ov = fp8emu.encode(part, fmt, saturate="ovfinf", **opts)
        assert np.array_equal(sp[~inf], sf[~inf]) and np.array_equal(sp[inf], ov[inf])
        assert inf.any() and not np.array_equal(sf[inf], ov[inf])


def test_unsigned_format_checks():
    with pytest.raises(ValueError, match="nan='top'"):
        fp8emu.Format("u", ebits=5, mbits=3, bias=16, signed=False, inf="top")
    with pytest.raises(ValueError, match="p in 1..8"):
        p3109_format(9, signed=False)


SR = {"stochastic": RoundMode.StochasticFastest, "stochastic_p3109": RoundMode.Stochastic,
      "stochastic_odd": RoundMode.StochasticOdd, "stochastic_fast": RoundMode.StochasticFast}
SR_FORMATS = [("e4m3fn", format_info_ocp_e4m3), ("e5m2", format_info_ocp_e5m2),
              ("binary8p4", format_info_p3109(8, 4))]


@pytest.mark.parametrize("name", list(SR))
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("fmt_name,fi", SR_FORMATS)
def test_stochastic_modes_every_random_value_matches_gfloat(name, k, fmt_name, fi):
    fmt = fp8emu.get_format(fmt_name)
    rng = np.random.default_rng(k)
    grid = fmt.values()[np.isfinite(fmt.values())]
    grid = np.unique(np.abs(grid))
    lo, hi = grid[1:-1], grid[2:]
    # points between neighbours: random, and exact multiples of 2**-(k+2) of the gap (ties at k bits)
    t = np.concatenate([rng.random(lo.size), (np.arange(lo.size) % 2 ** (k + 2)) / 2 ** (k + 2)])
    x = np.concatenate([lo, lo]) + t * (np.concatenate([hi, hi]) - np.concatenate([lo, lo]))
    x = np.concatenate([x, -x])
    r_all = np.arange(2 ** k, dtype=np.uint64)
    ups = np.zeros(x.shape, int)
    for r in r_all:
        got = fp8emu.decode(fp8emu.encode(x, fmt, rounding=name, random_bits=np.full(x.shape, r),
                                          sr_bits=k), fmt, dtype=np.float64)
        want = round_ndarray(fi, x, SR[name], False, np.full(x.shape, int(r), np.int64), k)
        assert np.array_equal(got, want, equal_nan=True), (name, k, int(r))
        ups += np.abs(got) > np.abs(fp8emu.decode(fp8emu.encode(x, fmt, rounding="rtz"), fmt, dtype=np.float64))
    # the number of the 2**k random values that round away, from the documented rules
    a = np.abs(x)
    down = np.abs(fp8emu.decode(fp8emu.encode(a, fmt, rounding="rtz"), fmt, dtype=np.float64))
    up = np.abs(fp8emu.decode(fp8emu.encode(a, fmt, rounding="rup"), fmt, dtype=np.float64))
    f = np.where(up > down, (a - down) / np.where(up > down, up - down, 1), 0.0)   # exact for these inputs
    fk = f * 2 ** k
    if name == "stochastic":
        want_ups = np.floor(fk)
    elif name == "stochastic_p3109":
        want_ups = np.where(fk - np.floor(fk) == 0.5, np.floor(fk) + np.floor(fk) % 2, np.round(fk))
    elif name == "stochastic_odd":
        want_ups = np.where(fk - np.floor(fk) == 0.5, np.floor(fk) + 1 - np.floor(fk) % 2, np.round(fk))
    else:   # f + (2r + 1) / 2**(k+1) >= 1  <=>  r >= 2**k - f * 2**k - 1/2
        want_ups = np.where(f > 0, 2 ** k - np.maximum(0, np.ceil(2 ** k - fk - 0.5)), 0)
    assert np.array_equal(ups, want_ups.astype(int))


# ----------------------------------------------------------------------------- the interim report v4.0
_TABLES = Path(__file__).resolve().parent / "data" / "p3109" / "value_tables_K8.npz"


def test_every_code_matches_the_v4_value_tables():
    """The P3109 interim report v4.0's own value tables (github.com/P3109/Public 26df0d0, recorded by
    tools/record_p3109_tables.py): every code of every 8-bit format, signed/unsigned, extended/finite."""
    with np.load(_TABLES) as z:
        assert str(z["version"]) == "4.0" and str(z["commit"]).startswith("26df0d048ac2")
        names = [k for k in z.files if k.startswith("Binary8p")]
        assert len(names) == 30
        for name in names:
            p, signed, domain = int(name[8]), name[9] == "s", {"e": "extended", "f": "finite"}[name[10]]
            f = p3109_format(p, signed=signed, domain=domain)
            np.testing.assert_array_equal(f.values(), z[name], err_msg=name)
            assert f.has_inf == (domain == "extended") and not f.has_negative_zero


@pytest.mark.parametrize("p", _ps(range(1, 8), (1, 4, 7)))
def test_finite_formats_match_gfloat(p):
    """The finite domain (no Inf: the top code is finite, the overflow code changes) at the two extreme
    precisions and one between; the others (same code path, gfloat's rounding at 10 s each) with -m exhaustive."""
    from gfloat.types import Domain
    for signed in (True, False):
        fi = format_info_p3109(8, p, Signedness.Signed if signed else Signedness.Unsigned, Domain.Finite)
        f = p3109_format(p, signed=signed, domain="finite")
        assert f.max == fi.max and f.min_subnormal == fi.smallest_subnormal
        v = _values(np.random.default_rng(p), f, signed)
        with np.errstate(all="ignore"):
            for mode, gm in MODES.items():
                for sat in (True, False):
                    want = round_ndarray(fi, v, gm, sat)
                    got = fp8emu.decode(fp8emu.encode(v, f, rounding=mode, saturate=sat), f, dtype=np.float64)
                    np.testing.assert_array_equal(got, want, err_msg=f"{f.name} {mode} sat={sat}")


def test_p3109_domain_errors():
    with pytest.raises(ValueError, match="domain must be 'extended' or 'finite'"):
        p3109_format(3, domain="finit")
    assert p3109_format(3, signed=False, domain="finite").name == "binary8p3uf"


def test_v4_names_satnone_and_the_three_stochastic_variants():
    """Report v4.0 section 4.7.4/4.7.5: SatNone (v3's OvfInf), and StochasticA/B/C by its formulas, written
    here with Python integers on a value d of the way between two neighbouring codes of binary8p4."""
    from fp8emu.rounding import P3109_ROUNDING_NAMES
    x = np.array([224.1, -1e9, np.inf], np.float64)
    assert fp8emu.encode(x, "binary8p4", saturate="satnone").tolist() == fp8emu.encode(x, "binary8p4").tolist()
    lo, step = 1.0, 2.0 ** -3                        # binary8p4 neighbours 1 and 1.125 (0x40, 0x41)
    rng = np.random.default_rng(4109)
    n_bits = 4
    for _ in range(200):
        num = int(rng.integers(1, 1 << 12))         # d = num / 2**12, exact
        r = int(rng.integers(0, 1 << n_bits))
        v = np.array([lo + step * num / 2 ** 12])
        d_scaled_a = (num << n_bits) >> 12                       # floor(d 2^N)
        d_scaled_b = (num << (n_bits + 1)) >> 12                 # floor(d 2^(N+1))
        q, rem = divmod(num << n_bits, 1 << 12)                  # RNITE(d 2^N)
        rnite = q + (1 if rem > 1 << 11 or (rem == 1 << 11 and q % 2) else 0)
        away = {"StochasticA": d_scaled_a + r >= 1 << n_bits,
                "StochasticB": d_scaled_b + 2 * r + 1 >= 1 << (n_bits + 1),
                "StochasticC": rnite + r >= 1 << n_bits}
        for name, up in away.items():
            got = fp8emu.encode(v, "binary8p4", rounding=P3109_ROUNDING_NAMES[name],
                                random_bits=np.array([r], np.uint8), sr_bits=n_bits).item()
            assert got == (0x41 if up else 0x40), (name, num, r)
