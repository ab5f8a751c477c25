"""Pack third-party FP8 tensor-core recordings into tests/data/tc_recordings/*.npz.

Source: Khattak and Mikaitis, "Accurate Models of NVIDIA Tensor Cores"
(arXiv:2512.07004), repository github.com/north-numerical-computing/MATLAB-tensor-core
(BSD 2-Clause), folder ``model_validation/<GPU>/{E4M3,E5M2}`` for every GPU recorded with
FP8 inputs (Ada, L40S, H100, H200, B200), and ``model_validation/<GPU>/{fp16,bf16,tf32}`` for the
16-bit inputs (V100, A100, A2, Ada, L40S, H100, H200, B200; ``main_wide``): 5000 rows of one
``mma.sync.aligned.m16n8k32.row.col.<d>.<fmt>.<fmt>.<c>`` dot product each, K = 32
(``a_*.txt``/``b_*.txt``: inputs as float32 hex words; ``c_*_fp32.txt``: the float32
accumulator input; ``d_*_fp32.txt``: the float32 result the GPU returned and, where
recorded, ``d_*_fp16.txt``: the float16 result of the ``.f16`` instruction, written as the
float32 word of that float16 value; their CUDA source gives the f16 instruction
``__float2half(c)`` as C).

Run ``python3 tools/import_tc_recordings.py MIRROR`` with MIRROR a checkout (or bare
git directory) of that repository.  The fp8 codes come from ml_dtypes, not from fp8emu,
and each is checked to decode back to the recorded float32 word; each float16 result is
checked to be an exact float16 value.
"""

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "tc_recordings"
DTYPES = {"E4M3": ml_dtypes.float8_e4m3fn, "E5M2": ml_dtypes.float8_e5m2}
GPUS = ("Ada", "L40S", "H100", "H200", "B200")


def read(repo, path):
    r = subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def hex_words(text):
    return np.array([[int(t, 16) for t in line.split()] for line in text.splitlines() if line.strip()],
                    np.uint32)


def bin_words(text):
    return np.array([int(line, 2) for line in text.split()], np.uint32)


def main(repo):
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    OUT.mkdir(parents=True, exist_ok=True)
    for gpu in GPUS:
        for fmt, dt in DTYPES.items():
            base = f"model_validation/{gpu}/{fmt}/"
            a32 = hex_words(read(repo, f"{base}a_{gpu}_{fmt}.txt")).view(np.float32)
            b32 = hex_words(read(repo, f"{base}b_{gpu}_{fmt}.txt")).view(np.float32)
            c = bin_words(read(repo, f"{base}c_{gpu}_fp32.txt"))
            d = bin_words(read(repo, f"{base}d_{gpu}_fp32.txt"))
            arrays = {}
            d16 = read(repo, f"{base}d_{gpu}_fp16.txt")
            if d16 is not None:
                w = bin_words(d16).view(np.float32)
                h = w.astype(np.float16)
                if not np.array_equal(h.astype(np.float32).view(np.uint32), w.view(np.uint32)):
                    raise SystemExit(f"{gpu} {fmt}: a float16 result is not an exact float16 value")
                arrays["d16_bits"] = h.view(np.uint16)
            codes = []
            for x in (a32, b32):
                q = x.astype(dt)
                if not np.array_equal(q.astype(np.float32).view(np.uint32), x.view(np.uint32)):
                    raise SystemExit(f"{gpu} {fmt}: an input is not an exact {fmt} value")
                codes.append(q.view(np.uint8))
            path = OUT / f"{gpu.lower()}_{fmt.lower()}.npz"
            np.savez_compressed(path, a=codes[0], b=codes[1], c_bits=c, d_bits=d,
                                source_commit=np.array(commit), **arrays)
            print(gpu, fmt, codes[0].shape, sorted(arrays), "->", path)


#: The 16-bit-input recordings: GPU -> input types (folder names).
WIDE_GPUS = {"V100": ("fp16",), "A100": ("fp16", "bf16", "tf32"), "A2": ("fp16", "bf16", "tf32"),
             "Ada": ("fp16", "bf16", "tf32"), "L40S": ("fp16", "bf16", "tf32"), "H100": ("fp16", "bf16", "tf32"),
             "H200": ("fp16", "bf16", "tf32"), "B200": ("fp16", "bf16", "tf32")}


def wide_codes(x32, kind, where):
    """Bit patterns of float32 input words: float16 (uint16), bfloat16 (uint16) or tf32 (the float32 word)."""
    if kind == "tf32":
        return x32.view(np.uint32)
    if kind == "fp16":
        h = x32.astype(np.float16)
        if not np.array_equal(h.astype(np.float32).view(np.uint32), x32.view(np.uint32)):
            raise SystemExit(f"{where}: an input is not an exact float16 value")
        return h.view(np.uint16)
    w = x32.view(np.uint32)
    if (w & np.uint32(0xFFFF)).any():
        raise SystemExit(f"{where}: an input is not an exact bfloat16 value")
    return (w >> np.uint32(16)).astype(np.uint16)


def main_wide(repo, commit):
    """The fp16/bf16/tf32-input files: ``a``/``b`` hold the inputs' bit patterns (uint16, or uint32 words for tf32)."""
    for gpu, kinds in WIDE_GPUS.items():
        for kind in kinds:
            base = f"model_validation/{gpu}/{kind}/"
            a32 = hex_words(read(repo, f"{base}a_{gpu}_{kind}.txt")).view(np.float32)
            b32 = hex_words(read(repo, f"{base}b_{gpu}_{kind}.txt")).view(np.float32)
            arrays = dict(a=wide_codes(a32, kind, f"{gpu} {kind}"), b=wide_codes(b32, kind, f"{gpu} {kind}"),
                          c_bits=bin_words(read(repo, f"{base}c_{gpu}_fp32.txt")),
                          d_bits=bin_words(read(repo, f"{base}d_{gpu}_fp32.txt")))
            d16 = read(repo, f"{base}d_{gpu}_fp16.txt")
            if d16 is not None:
                w = bin_words(d16).view(np.float32)
                h = w.astype(np.float16)
                if not np.array_equal(h.astype(np.float32).view(np.uint32), w.view(np.uint32)):
                    raise SystemExit(f"{gpu} {kind}: a float16 result is not an exact float16 value")
                arrays["d16_bits"] = h.view(np.uint16)
            path = OUT / f"{gpu.lower()}_{kind}.npz"
            np.savez_compressed(path, source_commit=np.array(commit), **arrays)
            print(gpu, kind, arrays["a"].shape, "->", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
    repo_ = sys.argv[1] if len(sys.argv) > 1 else "."
    main_wide(repo_, subprocess.run(["git", "-C", repo_, "rev-parse", "HEAD"], check=True, capture_output=True,
                                    text=True).stdout.strip())
