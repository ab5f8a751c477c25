"""What ``scaled_mm`` says of Inf / NaN dequantisation scales, on every accumulator.

On the ``torch-cpu-*`` accumulators the RuntimeWarning said "multiplied by them in IEEE float32, as
cuBLAS's epilogue, giving Inf or NaN", where torch's CPU ``_scaled_mm`` (and the emulation of it) makes
NaN of every output the scale touches (an Inf scale times 3 is NaN there, not Inf).  The docstring said
values beyond float32's range are multiplied with a warning; they are an "overflows float32" error.
"""
import warnings

import numpy as np
import pytest

import fp8emu
from fp8emu import scaled_mm
from fp8emu.gemm import cpu_order


def _ab():
    rng = np.random.default_rng(3)
    a = fp8emu.encode(rng.standard_normal((2, 32)), "e4m3fn")
    b = fp8emu.encode(rng.standard_normal((32, 2)), "e4m3fn")
    return a, b


def _warned(**kw):
    a, b = _ab()
    # a recorded CPU order pinned: on a CPU no recorded model was proven on, without torch, "torch-cpu-emulated"
    # also warns that torch may sum in another order (a second warning, not about the scales)
    with cpu_order.use("mkl-2024.2-avx512"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", **kw)
    return out, [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]


@pytest.mark.parametrize("acc,scale_a,scale_b", [
    ("torch-cpu-onednn", np.inf, 1.0), ("torch-cpu-emulated", -np.inf, 1.0),
    ("torch-cpu-emulated", np.array([[np.inf], [1.0]], np.float32), np.ones((1, 2), np.float32)),
    ("torch-cpu-onednn", 1.0, np.nan)])
def test_the_torch_cpu_paths_warn_of_nan_outputs_not_of_cublas(acc, scale_a, scale_b):
    out, msgs = _warned(scale_a=scale_a, scale_b=scale_b, accumulator=acc)
    assert len(msgs) == 1
    assert "cuBLAS" not in msgs[0] and "IEEE" not in msgs[0]
    assert "NaN" in msgs[0] and "torch's CPU" in msgs[0]
    touched = ~np.isfinite(np.broadcast_to(np.asarray(scale_a, np.float32) * np.asarray(scale_b, np.float32), (2, 2)))
    assert np.isnan(out[touched]).all() and np.isfinite(out[~touched]).all()


def test_the_gpu_models_still_warn_of_ieee_products():
    out, msgs = _warned(scale_a=np.inf, accumulator="hopper")
    assert len(msgs) == 1 and "IEEE float32" in msgs[0] and "cuBLAS" in msgs[0]
    assert np.isinf(out).all()


def test_the_docstring_says_a_finite_scale_beyond_float32_is_an_error():
    doc = " ".join(scaled_mm.__doc__.split())
    assert "(or values beyond float32's range) are multiplied" not in doc
    assert "overflows float32" in doc
    with pytest.raises(ValueError, match="scale_a overflows float32"):
        _warned(scale_a=1e39)


def test_torch_itself_gives_nan_where_the_warning_says():
    torch = pytest.importorskip("torch")
    a, b = _ab()
    ta = torch.from_numpy(a).view(torch.float8_e4m3fn)
    tb = torch.from_numpy(np.ascontiguousarray(b.T)).view(torch.float8_e4m3fn).t()
    got = torch._scaled_mm(ta, tb, scale_a=torch.tensor(np.inf), scale_b=torch.tensor(1.0), out_dtype=torch.float32)
    assert torch.isnan(got).all()
