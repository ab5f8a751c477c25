"""Pack third-party FP8 tensor-core recordings into tests/data/tc_recordings/*.npz.

Source: Khattak and Mikaitis, "Accurate Models of NVIDIA Tensor Cores"
(arXiv:2512.07004), repository github.com/north-numerical-computing/MATLAB-tensor-core
(BSD 2-Clause), folder ``model_validation/{B200,H200}/{E4M3,E5M2}``: 5000 rows of one
``mma.sync.aligned.m16n8k32.row.col.f32.<fmt>.<fmt>.f32`` dot product each, K = 32
(``a_*.txt``/``b_*.txt``: inputs as float32 hex words; ``c_*_fp32.txt``: the float32
accumulator input; ``d_*_fp32.txt``: the result the GPU returned, as 32-bit binary).
Their validation script feeds C = 0 to the H100/H200 FP8 models, so only the B200
files carry C.

Run ``python3 tools/import_tc_recordings.py MIRROR`` with MIRROR a checkout (or bare
git directory) of that repository.  The fp8 codes come from ml_dtypes, not from fp8emu,
and each is checked to decode back to the recorded float32 word.
"""

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "tc_recordings"
DTYPES = {"E4M3": ml_dtypes.float8_e4m3fn, "E5M2": ml_dtypes.float8_e5m2}


def read(repo, path):
    return subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout


def hex_words(text):
    return np.array([[int(t, 16) for t in line.split()] for line in text.splitlines() if line.strip()],
                    np.uint32)


def bin_words(text):
    return np.array([int(line, 2) for line in text.split()], np.uint32)


def main(repo):
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    OUT.mkdir(parents=True, exist_ok=True)
    for gpu in ("B200", "H200"):
        for fmt, dt in DTYPES.items():
            base = f"model_validation/{gpu}/{fmt}/"
            a32 = hex_words(read(repo, f"{base}a_{gpu}_{fmt}.txt")).view(np.float32)
            b32 = hex_words(read(repo, f"{base}b_{gpu}_{fmt}.txt")).view(np.float32)
            c = bin_words(read(repo, f"{base}c_{gpu}_fp32.txt"))
            d = bin_words(read(repo, f"{base}d_{gpu}_fp32.txt"))
            codes = []
            for x in (a32, b32):
                q = x.astype(dt)
                if not np.array_equal(q.astype(np.float32).view(np.uint32), x.view(np.uint32)):
                    raise SystemExit(f"{gpu} {fmt}: an input is not an exact {fmt} value")
                codes.append(q.view(np.uint8))
            if gpu != "B200":
                c = np.zeros_like(c)
            np.savez_compressed(OUT / f"{gpu.lower()}_{fmt.lower()}.npz", a=codes[0], b=codes[1],
                                c_bits=c, d_bits=d, source_commit=np.array(commit))
            print(gpu, fmt, codes[0].shape, "->", OUT / f"{gpu.lower()}_{fmt.lower()}.npz")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
