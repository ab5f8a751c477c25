"""Record en_dtypes' HiFloat8 casts as test vectors (tests/data/hif8/en_dtypes-VERSION.npz).

en_dtypes (PyPI ``en-dtypes``, installed with ``pip install --no-deps en-dtypes``) is the one NumPy
library with a ``hifloat8`` type.  Recorded: the float64 bits of every code's value, and the codes its
``astype`` gives for every float16 and bfloat16 pattern (bfloat16 through float32, which is exact: en_dtypes
has no bfloat16 cast), 2**13 random float32 and float64 patterns, and the float64 midpoints of neighbouring
HiF8 values moved by one float64 ulp either way (ties and near-ties).  ``tests/test_hifloat.py`` proves
:mod:`fp8emu.hifloat` against the recording without en_dtypes installed.

Usage::

    python tools/record_hif8_vectors.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "hif8"


def main() -> int:
    import en_dtypes

    version = getattr(en_dtypes, "__version__", "unknown")
    t = en_dtypes.hifloat8
    rng = np.random.default_rng(20261204)
    vals = np.arange(256, dtype=np.uint8).view(t).astype(np.float64)
    v = np.unique(vals[np.isfinite(vals)])
    mids = np.concatenate([(v[:-1] + v[1:]) / 2, [1.25 * 2.0 ** 15]])
    near = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    inputs = {
        "float16": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16),
        "bfloat16": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16),
        "float32": rng.integers(0, 1 << 32, 1 << 13, dtype=np.uint64).astype(np.uint32).view(np.float32),
        "float64": np.concatenate([near, -near, rng.integers(0, np.iinfo(np.uint64).max, 1 << 13,
                                                             dtype=np.uint64, endpoint=True).view(np.float64)]),
    }
    out = {"version": np.array(version), "decode/float64": vals.view(np.uint64)}
    for src, x in inputs.items():
        with np.errstate(all="ignore"):
            y = x.astype(np.float32) if src == "bfloat16" else x
            out[f"encode/{src}"] = y.astype(t).view(np.uint8)
        out[f"input/{src}"] = x.view(np.uint16 if x.itemsize == 2 else np.uint32 if x.itemsize == 4 else np.uint64)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"en_dtypes-{version}.npz"
    np.savez_compressed(path, **out)
    print(f"en_dtypes {version}: {len(out) - 1} arrays -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
