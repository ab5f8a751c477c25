"""What a compiled kernel would gain: a throw-away C prototype timed next to fp8emu and ml_dtypes.

Run from the repository root (needs a C compiler; nothing is installed or kept)::

    python3 benchmarks/compiled_estimate.py [--n 4096] [--repeats 5]

It compiles, in a temporary folder, two small C loops that do exactly what fp8emu's NumPy
paths do, with fp8emu's own encode table: ``quantize_mx(x, "e4m3fn")`` fused into one pass
per 32-element block (finite amax, floor scale rule, multiply, half-table look-up), and the
plain float32 -> e4m3fn table cast; and float32 -> e4m3fn stochastic rounding (k = 32) as
one loop that draws numpy's PCG64 stream itself.  The codes are checked equal to fp8emu's before
timing.  The prototype skips the Inf/NaN-block handling (the data here are Gaussian), so
it is a bound on the gain, not a replacement: fp8emu adds no compiled dependency.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fp8emu  # noqa: E402
from fp8emu import tables  # noqa: E402

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
static inline uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline uint8_t look(const uint8_t *half, float y) {
    uint32_t u = bits(y);
    return half[(((u & 0xFFFFu) + 0xFFFFu) | u) >> 16];
}
void cast(const float *x, uint8_t *out, long n, const uint8_t *half) {
    for (long i = 0; i < n; i++) out[i] = look(half, x[i]);
}
/* numpy's PCG64 (128-bit LCG, XSL-RR output): the stream of bit_generator.random_raw */
typedef struct { __uint128_t state, inc; } pcg;
static inline uint64_t pcg_next(pcg *g) {
    const __uint128_t mult = ((__uint128_t)0x2360ED051FC65DA4ULL << 64) | 0x4385DF649FCCF645ULL;
    g->state = g->state * mult + g->inc;
    uint64_t v = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (v >> rot) | (v << ((-rot) & 63));
}
static pcg pcg_of(const uint64_t *s) {
    pcg g; g.state = ((__uint128_t)s[0] << 64) | s[1]; g.inc = ((__uint128_t)s[2] << 64) | s[3]; return g;
}
void draw(uint64_t *out, long n, const uint64_t *s) {
    pcg g = pcg_of(s);
    for (long i = 0; i < n; i++) out[i] = pcg_next(&g);
}
/* fp8emu's float32 stochastic rounding (k = 32, s0 discarded bits) in one loop: add the draw
   below bit s0, look the sum up, test the code as fp8emu does; flagged elements (and their
   draws) are returned for the exact core.  n even. */
long sr(const uint32_t *x, uint8_t *out, long n, const uint8_t *table, const uint64_t *s, int s0,
        uint8_t mag, uint8_t lo, uint8_t span, long *bad, uint32_t *badbits) {
    pcg g = pcg_of(s);
    long nb = 0;
    for (long i = 0; i < n; i += 2) {
        uint64_t w = pcg_next(&g);
        uint32_t r[2] = {(uint32_t)w, (uint32_t)(w >> 32)};
        for (int j = 0; j < 2; j++) {
            uint32_t v = x[i + j] + (r[j] >> (32 - s0));
            uint8_t c = table[v >> 16];
            out[i + j] = c;
            if ((uint8_t)((c & mag) - lo) > span) { bad[nb] = i + j; badbits[nb++] = r[j]; }
        }
    }
    return nb;
}
void mx(const float *x, uint8_t *out, uint8_t *scale_codes, long nblocks, const uint8_t *half, int emax) {
    for (long b = 0; b < nblocks; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) { float a = fabsf(xb[i]); amax = a > amax ? a : amax; }
        int e = -127;
        if (amax > 0) { int ex; frexpf(amax, &ex); e = ex - 1 - emax; }
        if (e < -127) e = -127;
        if (e > 127) e = 127;
        scale_codes[b] = (uint8_t)(e + 127);
        float s = ldexpf(1.0f, -e);
        for (int i = 0; i < 32; i++) out[32 * b + i] = look(half, xb[i] * s);
    }
}
"""


def build(tmp):
    src, lib = Path(tmp) / "proto.c", Path(tmp) / "proto.so"
    src.write_text(SOURCE)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-lm"],
                   check=True)
    return ctypes.CDLL(str(lib))


def interleaved(fns, repeats):
    for f in fns:
        f()
    ts = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            t = time.thread_time()
            f()
            ts[i].append(time.thread_time() - t)
    return [float(np.median(t)) for t in ts]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="side of the square float32 input")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    fp8emu.set_threads(1)
    x = np.random.default_rng(0).standard_normal((args.n, args.n)).astype(np.float32)
    fmt = fp8emu.get_format("e4m3fn")
    table = tables.encode_table(fmt, "float32", "rne", True)
    half = np.ascontiguousarray(table[: 1 << 16])
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(tmp)
        P = ctypes.c_void_p
        out, sc = np.empty(x.size, np.uint8), np.empty(x.size // 32, np.uint8)

        def c_cast():
            lib.cast(P(x.ctypes.data), P(out.ctypes.data), ctypes.c_long(x.size), P(half.ctypes.data))

        def c_mx():
            lib.mx(P(x.ctypes.data), P(out.ctypes.data), P(sc.ctypes.data), ctypes.c_long(x.size // 32),
                   P(half.ctypes.data), ctypes.c_int(8))

        c_cast()
        assert np.array_equal(out.reshape(x.shape), fp8emu.encode(x, "e4m3fn", saturate=True))
        c_mx()
        q = fp8emu.quantize_mx(x, "e4m3fn")
        assert np.array_equal(out.reshape(x.shape), q.codes) and np.array_equal(sc, q.scale_codes.ravel())
        ml = lambda: x.astype(ml_dtypes.float8_e4m3fn)   # noqa: E731
        t = interleaved([ml, lambda: fp8emu.encode(x, "e4m3fn", saturate=True), c_cast,
                         lambda: fp8emu.quantize_mx(x, "e4m3fn"), c_mx], args.repeats)
    print(f"{args.n}x{args.n} float32, one thread, thread-time medians of {args.repeats} interleaved runs; "
          f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}")
    _rows("ratio to ml_dtypes' float32 -> e4m3fn cast", ["ml_dtypes astype", "fp8emu encode (NumPy)",
          "C table cast (prototype)", "fp8emu quantize_mx (NumPy)", "C fused quantize_mx (prototype)"], t, 1)
    sr_estimate(args.repeats)
    return 0


def sr_estimate(repeats, n=1 << 22):
    """float32 -> e4m3fn stochastic rounding (k = 32, PCG64): NumPy path, C loop, and the draw alone."""
    from fp8emu import codec

    x = (np.random.default_rng(0).standard_normal(n) * 8).astype(np.float32)
    fmt = fp8emu.get_format("e4m3fn")
    plan = codec._sr_plan(fmt, x.dtype, False, n)
    table = np.ascontiguousarray(plan.table)

    def state(seed):
        st = np.random.default_rng(seed).bit_generator.state["state"]
        m = (1 << 64) - 1
        return np.array([st["state"] >> 64, st["state"] & m, st["inc"] >> 64, st["inc"] & m], np.uint64)

    s1 = state(1)
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(tmp)
        P = ctypes.c_void_p
        out = np.empty(n, np.uint8)
        bad, badbits = np.empty(n, np.int64), np.empty(n, np.uint32)
        raw = np.empty(n // 2, np.uint64)

        def c_sr():
            nb = lib.sr(P(x.ctypes.data), P(out.ctypes.data), ctypes.c_long(n), P(table.ctypes.data),
                        P(s1.ctypes.data), ctypes.c_int(plan.s0), ctypes.c_uint8(plan.mag_mask),
                        ctypes.c_uint8(plan.trust_lo), ctypes.c_uint8(plan.trust_span),
                        P(bad.ctypes.data), P(badbits.ctypes.data))
            sel = bad[:nb]
            out[sel] = tables.encode_exact(x[sel], fmt, "stochastic", False, badbits[:nb].astype(np.uint64), 32)
            return nb

        def c_draw():
            lib.draw(P(raw.ctypes.data), ctypes.c_long(n // 2), P(s1.ctypes.data))

        lib.sr.restype = ctypes.c_long
        nb = c_sr()
        ours = lambda: fp8emu.encode(x, fmt, rounding="stochastic", rng=1, threads=1)   # noqa: E731
        assert np.array_equal(out, ours()), "the C loop's codes differ from fp8emu's"
        c_draw()
        assert np.array_equal(raw, np.random.default_rng(1).bit_generator.random_raw(n // 2))
        ml = lambda: x.astype(ml_dtypes.float8_e4m3fn)   # noqa: E731
        np_draw = lambda: np.random.default_rng(1).bit_generator.random_raw(n // 2)   # noqa: E731
        t = interleaved([ml, ours, c_sr, np_draw, c_draw], repeats)
    print(f"\nfloat32 -> e4m3fn stochastic rounding, k = 32 from PCG64, {n} elements of standard_normal * 8, "
          f"one thread, thread-time medians of {repeats} interleaved runs ({nb} elements, "
          f"{nb / n:.2%}, to the exact core)")
    _rows("ratio to ml_dtypes' RNE cast", ["ml_dtypes astype (RNE)", "fp8emu stochastic (NumPy)",
          "C loop: draw, add, look-up, test", "numpy random_raw alone (the draw)", "C PCG64 draw alone"], t, 2)


def _rows(ratio_title, names, times, digits):
    """A Markdown table of times (seconds) with each one's ratio to the first (the ml_dtypes cast)."""
    print(f"| path | ms | {ratio_title} |")
    print("|---|---|---|")
    for name, v in zip(names, times):
        print(f"| {name} | {v * 1e3:.{digits}f} | {times[0] / v:.2f}x |")


if __name__ == "__main__":
    raise SystemExit(main())
