"""Record what each ml_dtypes release's casts produce, as test vectors that need no such release installed.

For each version given, a fresh venv gets ``ml_dtypes==VERSION`` (and NumPy) from the package index, and a
script run there casts a fixed probe set to every narrow type that release has and decodes every code of
each type to float16, bfloat16, float32 and float64.  The results land in
``tests/data/library_vectors/ml_dtypes-VERSION.npz``; the inputs, the same for every version, in
``tests/data/library_vectors/inputs.npz``.  ``tests/test_library_versions.py`` proves each versioned
profile (``ml_dtypes-0.6``, ``ml_dtypes-0.7``) against the recordings of the versions it claims, so a
machine with one release installed still proves the rules for the others.

The probes (made in the recording venv from ml_dtypes' own values, never from fp8emu):

* float16 and bfloat16: every bit pattern;
* float32: every upper half with the lower halves 0, 1, 0x7FFF, 0x8000, 0x8001 and 0xFFFF, and random
  patterns;
* float64: every midpoint between neighbouring values of each type, exactly and moved by 2**-52, 2**-40
  and 2**-29 relative (single and double rounding disagree there), every upper 19 bits with and without
  a sticky bit, the float32 probes widened, and random patterns;
* NaNs of both signs with several payloads in every source type (included above).

Usage::

    python tools/record_library_vectors.py 0.5.4 0.6.0 0.7.0
    python tools/record_library_vectors.py 0.7.0 --python /path/to/venv/bin/python   # an installed release

float8_e5m3fnu (UE5M3, new in 0.7.0) was added to the recording of 0.7.0 that way (the probe inputs kept,
so its float64 probes hold no midpoints of its own; its float16/bfloat16 probes are every pattern).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "library_vectors"

# Runs inside the recording venv: only NumPy and the ml_dtypes under test are importable there.
SCRIPT = r'''
import sys
import numpy as np
import ml_dtypes

out_inputs, out_codes, write_inputs = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
NAMES = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
         "float8_e4m3", "float8_e3m4", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
         "float8_e5m3fnu"]
BITS = {n: (8 if n.startswith("float8") else int(n[5])) for n in NAMES}
rng = np.random.default_rng(20261201)

def values64(name):
    """float64 value of every code of one type (from ml_dtypes itself)."""
    return np.arange(1 << BITS[name], dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float64)

def make_inputs():
    f16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    f32 = np.concatenate([(hi[:, None] | lows[None, :]).reshape(-1),
                          rng.integers(0, 1 << 32, 1 << 14, dtype=np.uint64).astype(np.uint32)])
    mids = []
    for n in NAMES:
        if not hasattr(ml_dtypes, n):
            continue
        v = np.unique(values64(n))
        v = v[np.isfinite(v)]
        m = (v[:-1] + v[1:]) / 2
        for r in (0.0, 2.0 ** -52, 2.0 ** -40, 2.0 ** -29):
            mids += [m * (1 + r), m * (1 - r)]
    mids = np.concatenate(mids)
    with np.errstate(invalid="ignore"):
        w = f32[::3].view(np.float32).astype(np.float64).view(np.uint64)
    near = (w[:, None] + np.array([-1, 0, 1], np.int64).astype(np.uint64)[None, :]).reshape(-1)
    hi19 = np.arange(1 << 19, dtype=np.uint64) << np.uint64(45)
    rand = rng.integers(0, np.iinfo(np.uint64).max, 1 << 14, dtype=np.uint64, endpoint=True)
    f64 = np.concatenate([mids.view(np.uint64), near, hi19, hi19 | np.uint64(1), rand])
    return {"float16": f16, "bfloat16": f16, "float32": f32, "float64": f64}

if write_inputs:
    inputs = make_inputs()
    np.savez_compressed(out_inputs, **inputs)
with np.load(out_inputs) as z:
    inputs = {k: z[k] for k in z.files}
view = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}
uint = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}
codes = {"version": np.array(ml_dtypes.__version__), "numpy": np.array(np.__version__)}
for n in NAMES:
    if not hasattr(ml_dtypes, n):
        continue
    dt = getattr(ml_dtypes, n)
    for src, pats in inputs.items():
        with np.errstate(all="ignore"):
            codes[f"encode/{n}/{src}"] = pats.view(view[src]).astype(dt).view(np.uint8)
    c = np.arange(1 << BITS[n], dtype=np.uint8).view(dt)
    for dst in view:
        with np.errstate(all="ignore"):
            codes[f"decode/{n}/{dst}"] = c.astype(view[dst]).view(uint[dst])
np.savez_compressed(out_codes, **codes)
print(f"ml_dtypes {ml_dtypes.__version__} (numpy {np.__version__}): {len(codes) - 2} arrays -> {out_codes}")
'''


def record(version: str, out: Path, write_inputs: bool, quiet: bool, python: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if python is not None:
            # an interpreter that already has this release (no package index needed); checked below
            script = Path(tmp) / "record.py"
            script.write_text(SCRIPT)
            got = subprocess.run([python, "-c", "import ml_dtypes; print(ml_dtypes.__version__)"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            if got != version:
                raise SystemExit(f"--python {python} has ml_dtypes {got}, not {version}")
            subprocess.run([python, script, out / "inputs.npz", out / f"ml_dtypes-{version}.npz",
                            "1" if write_inputs else "0"], check=True)
            return
        env = Path(tmp) / "venv"
        venv.create(env, with_pip=True)
        py = env / "bin" / "python"
        if not quiet:
            print(f"installing ml_dtypes=={version} into a fresh venv ...", file=sys.stderr)
        subprocess.run([py, "-m", "pip", "install", "-q", f"ml_dtypes=={version}", "numpy"], check=True)
        script = Path(tmp) / "record.py"
        script.write_text(SCRIPT)
        subprocess.run([py, script, out / "inputs.npz", out / f"ml_dtypes-{version}.npz",
                        "1" if write_inputs else "0"], check=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("versions", nargs="+", help="ml_dtypes releases to record, e.g. 0.5.4 0.6.0 0.7.0")
    p.add_argument("--out", type=Path, default=OUT, help=f"folder of the vectors (default {OUT})")
    p.add_argument("--new-inputs", action="store_true", help="draw the probe inputs anew (default: reuse)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--python", type=Path, default=None,
                   help="record with this interpreter (which must have the one version given) instead of a "
                        "fresh venv from the package index")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    write = args.new_inputs or not (args.out / "inputs.npz").exists()
    for v in args.versions:
        record(v, args.out, write, args.quiet, args.python)
        write = False
    return 0


if __name__ == "__main__":
    sys.exit(main())
