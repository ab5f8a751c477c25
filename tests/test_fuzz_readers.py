"""A seeded corpus of byte mutations of valid files drives every file reader.

Each reader must return a result bounded by the file (no allocation beyond a small multiple of the
file's size) or raise ValueError: never another exception type, never a hang.  The corpus is
deterministic (seeded), small enough for the default suite (the whole test well under 30 s), and
mutates where the claims live (headers, lengths, digits) more often than raw data.
"""

from __future__ import annotations

import json
import re
import time
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from safetensors import numpy as st_numpy

import fp8emu
from fp8emu import conformance, readers
from fp8emu.lab import study
from fp8emu.testing import load_golden
from fp8emu.testing.golden import save_rle
from fp8emu.testing.plugin import _read_snapshot

N_MUTANTS = 100         # per seed file; 14 seed files


def _mutate(raw: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(raw)
    op = int(rng.integers(0, 9))
    n = len(b)
    # positions biased towards the start, where headers and lengths are
    pos = lambda: int(min(n - 1, abs(rng.normal(0, max(8, n / 6))))) if n else 0  # noqa: E731
    if op == 0 and n:                                      # flip bits
        for _ in range(int(rng.integers(1, 9))):
            b[pos()] ^= 1 << int(rng.integers(0, 8))
    elif op == 1:                                          # truncate
        del b[int(rng.integers(0, n + 1)):]
    elif op == 2:                                          # insert random bytes
        i = pos()
        b[i:i] = rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
    elif op == 3 and n:                                    # overwrite a run with one byte value
        i = pos()
        b[i:i + int(rng.integers(1, 32))] = bytes([int(rng.choice([0, 0xFF, 0x7F, 0x80, 0x22, 0x5B]))]) * 8
    elif op == 4:                                          # replace a number with a hostile one
        text = bytes(b)
        nums = [m.span() for m in re.finditer(rb"-?\d+", text[:4096])]
        if nums:
            s, e = nums[int(rng.integers(0, len(nums)))]
            new = rng.choice([b"-1", b"0", b"1099511627776", b"18446744073709551615", b"3.5", b"1e400", b"true"])
            b[s:e] = new
    elif op == 5:                                          # duplicate a chunk
        i = pos()
        b[i:i] = b[i:i + int(rng.integers(1, 256))]
    elif op == 6:                                          # replace a string token (JSON/npy header)
        text = bytes(b)
        strs = [m.span() for m in re.finditer(rb'"[^"\\]{0,40}"|\'[^\']{0,40}\'', text[:4096])]
        if strs:
            s, e = strs[int(rng.integers(0, len(strs)))]
            b[s:e] = rng.choice([b'"F8_E4M3FNUZ"', b'"float32"', b"[1, 2]", b"{}", b'"no"', b"null", b"'|O'",
                                 b"[" * 100, b'"<f8"', b"(1, 2)"])
    elif op == 7:                                          # swap two bytes
        if n > 1:
            i, j = pos(), pos()
            b[i], b[j] = b[j], b[i]
    else:                                                  # random garbage of a similar length
        b = bytearray(rng.integers(0, 256, max(1, n // 4), dtype=np.uint8).tobytes())
    return bytes(b)


# ----------------------------------------------------------------------------- seed files and readers
def _study_all(path):
    refs, _ = study.discover([path])
    out = []
    for r in refs:
        for a, b in study.chunk_ranges(r, 1024):
            out.append(r.read(a, b))
    return out


def _seed_files(d):
    rng = np.random.default_rng(0)
    files = {}
    p = d / "m.safetensors"
    st_numpy.save_file({"a.w": rng.standard_normal((40, 16)).astype(np.float32),
                        "b.w": rng.standard_normal((8, 8)).astype(ml_dtypes.bfloat16),
                        "c.w": np.linspace(-2, 2, 32).astype(ml_dtypes.float8_e4m3fnuz).reshape(4, 8),
                        "d.i": np.arange(6, dtype=np.int32)}, str(p), metadata={"format": "np"})
    files["safetensors"] = (p, _study_all)
    p = d / "a.npy"
    np.save(p, rng.standard_normal((300, 8)).astype(np.float32))
    files["npy"] = (p, _study_all)
    p = d / "a.npz"
    np.savez(p, w=rng.standard_normal((20, 4)).astype(np.float32), h=np.ones(3, np.float16))
    files["npz"] = (p, _study_all)
    p = d / "c.npz"
    np.savez_compressed(p, w=np.zeros((64, 64), np.float32))
    files["npz-deflated"] = (p, readers.read_npz)
    p = d / "g.json"
    fp8emu.save_golden(p, "e2m1fn", rounding="stochastic", seed=1, sr_bits=8)
    files["golden-json"] = (p, load_golden)
    p = d / "g.npz"
    fp8emu.save_golden(p, "e5m2", source_dtype="bfloat16", profile="ocp", saturate=True)
    files["golden-npz"] = (p, load_golden)
    p = d / "t.rle"
    save_rle(p, "e4m3fn", source_dtype="float16")
    files["rle"] = (p, conformance.read_rle)
    files["golden-rle"] = (p, load_golden)
    p = d / "snap.npz"
    x = np.linspace(-3, 3, 24, dtype=np.float32)
    with open(p, "wb") as fh:
        np.savez(fh, format_version=np.array(1), kind=np.array("fp8_golden"), format=np.array("e4m3fn"),
                 profile=np.array("ocp"), options=np.array(json.dumps({"profile": "ocp"})),
                 codes=fp8emu.encode(x, "e4m3fn"), x=x, x_dtype=np.array("float32"))
    files["fp8_golden"] = (p, _read_snapshot)
    ck = d / "ckpt"
    ck.mkdir()
    st_numpy.save_file({"l0.w": np.ones((4, 4), np.float32)}, str(ck / "model-00001-of-00002.safetensors"))
    st_numpy.save_file({"l1.w": np.ones((4, 4), np.float16)}, str(ck / "model-00002-of-00002.safetensors"))
    idx = ck / "model.safetensors.index.json"
    idx.write_text(json.dumps({"metadata": {"total_size": 64},
                               "weight_map": {"l0.w": "model-00001-of-00002.safetensors",
                                              "l1.w": "model-00002-of-00002.safetensors"}}))
    files["shard-index"] = (idx, lambda _p: _study_all(ck))
    files["shard"] = (ck / "model-00001-of-00002.safetensors", lambda _p: _study_all(ck))
    p = d / "w.npy"
    np.save(p, np.linspace(-1, 1, 64, dtype=np.float32))
    out = d / "out"
    study.run_study([p], out, recipes=["tensor-e4m3fn", "mx-e4m3fn-floor"], progress=False, report=False)
    files["results.csv"] = (out / "results.csv", study.read_results)
    files["json"] = (idx, readers.read_json)
    return files


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return _seed_files(tmp_path_factory.mktemp("fuzz"))


def _nbytes(result):
    if isinstance(result, np.ndarray):
        return result.nbytes
    if isinstance(result, dict):
        return sum(_nbytes(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return sum(_nbytes(v) for v in result)
    return 0


def test_every_reader_survives_byte_mutations(corpus):
    t_start = time.perf_counter()
    outcomes = {}
    for kind, (path, read) in corpus.items():
        original = path.read_bytes()
        assert read(path) is not None                       # the seed file itself reads
        rng = np.random.default_rng([ord(c) for c in kind])
        ok = errors = 0
        try:
            for i in range(N_MUTANTS):
                mutant = _mutate(original, rng)
                path.write_bytes(mutant)
                tracemalloc.start()
                t0 = time.perf_counter()
                try:
                    result = read(path)
                    ok += 1
                except ValueError as exc:
                    result = None
                    errors += 1
                    assert str(exc), kind
                except Exception as exc:   # noqa: BLE001 - the point of the test
                    pytest.fail(f"{kind} mutant {i}: {type(exc).__name__}: {exc} (first bytes {mutant[:80]!r})")
                finally:
                    peak = tracemalloc.get_traced_memory()[1]
                    tracemalloc.stop()
                elapsed = time.perf_counter() - t0
                assert elapsed < 3, f"{kind} mutant {i} took {elapsed:.1f} s"
                # memory bounded by the file: the result and the peak are a small multiple of its size
                bound = 32 * len(original) + (8 << 20)
                assert peak < bound, f"{kind} mutant {i}: peak {peak} bytes for a {len(mutant)}-byte file"
                if result is not None:
                    assert _nbytes(result) <= 16 * max(len(mutant), 1) + (1 << 20), kind
        finally:
            path.write_bytes(original)
        outcomes[kind] = (ok, errors)
    # the corpus exercises both outcomes overall, and every reader refuses some mutants
    assert all(err > 0 for _, err in outcomes.values()), outcomes
    assert time.perf_counter() - t_start < 30
