"""torch's CPU ``_scaled_mm``, both paths, reproduced by the ``torch-cpu-*`` accumulator presets.

Expectations come from torch: vectors recorded by tools/record_torch_cpu_scaled_mm.py
(tests/data/torch_cpu/vectors.json: inputs by seed, outputs as hashes and samples), and live
torch where it is importable.  Never from fp8emu.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import fp8emu
import torch_cpu_cases as cases
from fp8emu.gemm import cpu_order
from fp8emu.gemm.torch_cpu import fast_accum_accumulator

DATA = Path(__file__).parent / "data" / "torch_cpu" / "vectors.json"
VECTORS = json.loads(DATA.read_text())
E4 = "e4m3fn"


#: The CPU the vectors were recorded on (meta: AMX-INT8 Xeon, MKL 2024.2): compared with its recorded model.
RECORDED_ON = "mkl-2024.2-avx512"


def _emulate(spec, **extra):
    a, b, sa, sb, bias, sr = cases.inputs(spec)
    with warnings.catch_warnings(), cpu_order.use(RECORDED_ON):
        # K > 768 on the emulated path: reproduced on one thread, which is how the vectors were recorded
        warnings.filterwarnings("ignore", "torch-cpu-emulated: mkl-2024.2-avx512 is proven", RuntimeWarning)
        return _scaled_mm(spec, a, b, sa, sb, bias, sr, **extra)


def _scaled_mm(spec, a, b, sa, sb, bias, sr, **extra):
    return fp8emu.scaled_mm(a, b, a_format=spec["a"], b_format=spec["b"], scale_a=sa, scale_b=sb, bias=bias,
                            out_dtype=spec["out"], scale_result=sr, accumulator="torch-cpu-" + spec["path"],
                            **extra)


def _groups():
    out = {}
    for c in VECTORS["cases"]:
        out.setdefault((c["path"], c["out"]), []).append(c)
    return sorted(out)


@pytest.mark.parametrize("path,out", _groups())
def test_recorded_vectors(path, out):
    cs = [c for c in VECTORS["cases"] if c["path"] == path and c["out"] == out]
    bad = []
    for c in cs:
        got = cases.output_bits(_emulate(c), out)
        flat = got.reshape(-1)
        wrong = [(i, v, int(flat[i])) for i, v in c["samples"] if int(flat[i]) != v]
        if cases.digest(got) != c["sha256"] or wrong:
            bad.append((c.get("seed"), c["M"], c["K"], c["N"], c["scales"], c["bias"], wrong[:3]))
    assert not bad, f"{len(bad)} of {len(cs)} recorded cases differ: {bad[:5]}"


def test_the_recording_covers_what_the_range_promises():
    cs = VECTORS["cases"]
    assert VECTORS["meta"]["torch"].startswith("2.13")
    assert sum(c["M"] * c["N"] for c in cs) > 200_000
    one = [c for c in cs if c["path"] == "onednn"]
    emu = [c for c in cs if c["path"] == "emulated"]
    assert max(c["K"] for c in one) == 4096 and max(c["K"] for c in emu) == 4096
    assert VECTORS["meta"]["threads"] == 1
    for group in (one, emu):
        assert {c["scales"] for c in group} >= {"unit", "pow2", "arbitrary"}
        assert {c["out"] for c in group} == {"float32", "bfloat16", "float16", "e4m3fn", "e5m2"}
        assert {c["bias"] for c in group} >= {None, "float32", "bfloat16", "float16"}
        assert any(c["scale_result"] not in (None, 1.0) for c in group)
    assert any(not c["mkldnn"] for c in emu) and any(c["scales"] == "rowwise" for c in emu)


# ----------------------------------------------------------------------------- facts torch showed
def _one(v, out, path="onednn", sr=None, fb=E4):
    """A 2x2 GEMM whose outputs are all ``v`` (one product 1 x 1 scaled by v)."""
    a = np.zeros((2, 16), np.uint8)
    a[:, 0] = 0x38
    b = np.zeros((16, 2), np.uint8)
    b[0, :] = 0x38 if fb == E4 else 0x3C
    return fp8emu.scaled_mm(a, b, a_format=E4, b_format=fb, scale_a=v, out_dtype=out, scale_result=sr,
                            accumulator="torch-cpu-" + path)[0, 0]


def test_onednn_path_gives_torchs_worked_example():
    # a = [5.5, 3], b = [2, 1], sa = 1.3712345, sb = 0.0912345: torch gives 1.7514545917510986 (printed by
    # torch 2.13.0+cpu); the exact product scaled once gives 1.751454472541809 (the "fp32" preset)
    a = np.zeros((1, 16), np.uint8)
    a[0, :2] = [0x4B, 0x44]
    b = np.zeros((16, 1), np.uint8)
    b[:2, 0] = [0x40, 0x38]
    kw = dict(a_format=E4, b_format=E4, scale_a=1.3712345, scale_b=0.0912345)
    assert float(fp8emu.scaled_mm(a, b, accumulator="torch-cpu-onednn", **kw)[0, 0]) == 1.7514545917510986
    assert float(fp8emu.scaled_mm(a, b, accumulator="fp32", **kw)[0, 0]) == 1.751454472541809


def test_output_conversions_of_each_path():
    # oneDNN: float32 -> float16 -> FP8 without saturating; emulated: torch's CPU cast (E4M3FN saturates)
    assert _one(480.0, E4) == 0x7F and _one(480.0, E4, "emulated", fb="e5m2") == 0x7E
    assert _one(30.998046875, E4) == 0x60 and _one(30.998046875, E4, "emulated", fb="e5m2") == 0x5F
    assert _one(1e6, "e5m2") == 0x7C and _one(1e6, "e5m2", "emulated", fb="e5m2") == 0x7C
    # scale_result divides (10 / 4 = 2.5, code 0x42), not multiplies
    assert _one(10.0, E4, "emulated", sr=4.0, fb="e5m2") == 0x42 == _one(10.0, E4, sr=4.0)


def test_use_fast_accum_mapping():
    assert fast_accum_accumulator(None, None) is None
    assert fast_accum_accumulator(True, None) == "hopper-fast"
    assert fast_accum_accumulator(False, None) == "hopper"
    assert fast_accum_accumulator(True, "torch-cpu-emulated") == "torch-cpu-emulated"
    with pytest.raises(ValueError, match="use_fast_accum=True means accumulator='hopper-fast'"):
        fast_accum_accumulator(True, "hopper")
    with pytest.raises(TypeError, match="True or False"):
        fast_accum_accumulator("yes", None)
    a = np.full((2, 32), 0x38, np.uint8)
    b = np.full((32, 2), 0x38, np.uint8)
    fast = fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, use_fast_accum=True)
    assert np.array_equal(fast, fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="hopper-fast"))


def test_preset_errors_name_the_other_path():
    a = np.zeros((2, 16), np.uint8)
    b = np.zeros((16, 2), np.uint8)
    with pytest.raises(ValueError, match="torch-cpu-emulated"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format="e5m2", accumulator="torch-cpu-onednn")
    with pytest.raises(ValueError, match="row-wise"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=np.ones((2, 1)), scale_b=np.ones((1, 2)),
                         accumulator="torch-cpu-onednn")
    with pytest.raises(ValueError, match="tensor-wise scales for both"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=np.ones((2, 1)),
                         accumulator="torch-cpu-emulated")
    with pytest.raises(ValueError, match="float8_e4m3fn / float8_e5m2"):
        fp8emu.scaled_mm(a, b, a_format="e4m3fnuz", b_format=E4, accumulator="torch-cpu-emulated")


def test_sgemm_k_blocks():
    # measured with live torch (module docstring of fp8emu.gemm.torch_cpu): blocks of 384 while more than
    # 768 remain, then one block or two halves
    from fp8emu.gemm.torch_cpu import sgemm_k_blocks
    assert sgemm_k_blocks(384) == [0, 384] and sgemm_k_blocks(385) == [0, 193, 385]
    assert sgemm_k_blocks(768) == [0, 384, 768] and sgemm_k_blocks(769) == [0, 384, 577, 769]
    assert sgemm_k_blocks(4096)[:4] == [0, 384, 768, 1152] and sgemm_k_blocks(4096)[-3:] == [3456, 3776, 4096]


@cpu_order.use(RECORDED_ON)
def test_emulated_path_warns_outside_the_reproduced_range():
    a = np.zeros((1, 800), np.uint8)
    b = np.zeros((800, 2), np.uint8)
    with pytest.warns(RuntimeWarning, match=r"not proven for this GEMM \(1x800x2.*a single row or column goes to "
                                            "MKL's gemv"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format="e5m2", accumulator="torch-cpu-emulated")
    with pytest.warns(RuntimeWarning, match=r"2x800x2 on an unknown number of thread\(s\)\): the thread count is "
                                            "not known, and on two threads MKL splits K > 768"):
        fp8emu.scaled_mm(np.zeros((2, 800), np.uint8), np.zeros((800, 2), np.uint8), a_format=E4,
                         b_format="e5m2", accumulator="torch-cpu-emulated")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fp8emu.scaled_mm(np.zeros((2, 768), np.uint8), np.zeros((768, 2), np.uint8), a_format=E4,
                         b_format="e5m2", accumulator="torch-cpu-emulated")


# ----------------------------------------------------------------------------- live torch
def _live_spec(rng, path):
    M, N = (int(x) for x in rng.integers(2, 40, 2))
    K = int(rng.choice([16, 200, 384, 500, 768, 1024, 2048] + ([4096] if path == "onednn" else [])))
    fa, fb = (E4, E4) if path == "onednn" else (E4, "e5m2")
    out = str(rng.choice(["float32", "bfloat16", "float16", "e4m3fn", "e5m2"]))
    return {"path": path, "seed": int(rng.integers(1 << 30)), "M": M, "K": K, "N": N, "a": fa, "b": fb,
            "scales": str(rng.choice(["unit", "pow2", "arbitrary"])), "bias": str(rng.choice(["float32", "bfloat16"])),
            "out": out, "scale_result": float(rng.uniform(0.1, 4)) if out in ("e4m3fn", "e5m2") else None,
            "mkldnn": True}


@pytest.mark.parametrize("path", ["onednn", "emulated"])
def test_live_torch(path):
    """Live torch on whatever CPU runs the suite: the emulated path with the order revealed here."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import record_torch_cpu_scaled_mm as rec
    flags = rec._cpu_flags()
    if "amx_fp16" in flags or (path == "onednn" and "amx_int8" not in flags):
        pytest.skip(f"torch takes its {path} path only on other CPUs (this one's AMX flags: {sorted(flags)})")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = np.random.default_rng(37)
        for _ in range(12):
            spec = _live_spec(rng, path)
            want = cases.output_bits(rec.run_torch(spec, torch), spec["out"])
            a, b, sa, sb, bias, sr = cases.inputs(spec)
            with cpu_order.use("auto"), warnings.catch_warnings():
                warnings.simplefilter("error")       # M, N >= 2: the revealed order must explain every output
                got = cases.output_bits(_scaled_mm(spec, a, b, sa, sb, bias, sr), spec["out"])
            assert np.array_equal(want, got), spec
    finally:
        torch.set_num_threads(threads)


def test_fp32_accumulator_is_the_onednn_path_for_power_of_two_scales():
    # per-product scaling by powers of two is exact, so the sequential float32 sum then one exact scaling
    # gives torch's bits; the recorded hashes decide
    cs = [c for c in VECTORS["cases"] if c["path"] == "onednn" and c["scales"] in ("unit", "pow2")
          and c["out"] == "float32" and c["bias"] is None and not c.get("specials")]
    assert len(cs) >= 3
    for c in cs:
        a, b, sa, sb, _, _ = cases.inputs(c)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)        # K = 100: not a cuBLASLt shape
            got = fp8emu.scaled_mm(a, b, a_format=c["a"], b_format=c["b"], scale_a=sa, scale_b=sb,
                                   accumulator="fp32")
        assert cases.digest(cases.output_bits(got, "float32")) == c["sha256"], c["seed"]


def test_live_use_fast_accum_changes_nothing_on_the_cpu():
    # why both use_fast_accum settings map to the same torch-cpu-* preset
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(41)
    one = torch.tensor(1.37)
    for fb in (torch.float8_e4m3fn, torch.float8_e5m2):
        a = torch.from_numpy(rng.standard_normal((16, 512)).astype(np.float32)).to(torch.float8_e4m3fn)
        b = torch.from_numpy(rng.standard_normal((24, 512)).astype(np.float32)).to(fb).t()
        r = [torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=f)
             for f in (False, True)]
        assert torch.equal(r[0], r[1])


def test_readme_states_the_recorded_count():
    total = sum(c["M"] * c["N"] for c in VECTORS["cases"])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"on {total:,} recorded outputs" in readme
