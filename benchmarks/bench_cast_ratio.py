"""float32 -> e4m3fn / e5m2 (RNE), fp8emu.encode against ml_dtypes astype: 2^22 Gaussian float32 values, one thread,
median of 9 interleaved runs, printed as ml_dtypes time / fp8emu time (issue 40). Run:
FP8EMU_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/bench_cast_ratio.py
"""
import os, time, statistics, platform
os.environ.setdefault("FP8EMU_THREADS", "1"); os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np, ml_dtypes, fp8emu
x = np.random.default_rng(0).standard_normal(1 << 22).astype(np.float32)
for fmt, dt in (("e4m3fn", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
    assert np.array_equal(fp8emu.encode(x, fmt, profile="ml_dtypes"), x.astype(dt).view(np.uint8))
    fp8emu.encode(x, fmt); x.astype(dt)
    tf, tm = [], []
    for _ in range(9):
        t = time.perf_counter(); fp8emu.encode(x, fmt); tf.append(time.perf_counter() - t)
        t = time.perf_counter(); x.astype(dt); tm.append(time.perf_counter() - t)
    print(f"{fmt}: fp8emu {statistics.median(tf)*1e3:.1f} ms, ml_dtypes {statistics.median(tm)*1e3:.1f} ms, "
          f"ratio ml_dtypes/fp8emu {statistics.median(tm)/statistics.median(tf):.2f}x")
print(platform.processor() or platform.machine(), "ml_dtypes", ml_dtypes.__version__, "numpy", np.__version__)
