"""``torch_cpu.cpu_path`` (which CPU ``_scaled_mm`` path torch takes) reads its formats and CPU flags as
given, or refuses them.

One string of flags (``"amx_int8"``, or a /proc/cpuinfo line) was read as its characters, so an AMX CPU
was said to take the emulated path; formats torch's CPU GEMM does not take (``"bogus"``, ``None``) got a
path, and ``"E4M3FN"`` against ``"e4m3fn"`` counted as two dtypes.  And ``torchao_emulated_mm`` adds its
bias in the output dtype as the other GEMMs do: a finite value beyond it is named, not made Inf.
"""

import numpy as np
import pytest

from fp8emu.formats import get_format
from fp8emu.gemm.torch_cpu import cpu_path, torchao_emulated_mm

AMX = {"amx_int8", "amx_fp16"}


@pytest.mark.parametrize("flags", ["amx_int8", "amx_int8 amx_fp16", b"amx_int8"], ids=repr)
def test_one_string_of_flags_is_refused_not_read_as_characters(flags):
    with pytest.raises(TypeError, match=r"flags must be an iterable of CPU flag names"):
        cpu_path("e4m3fn", "e4m3fn", tensorwise=True, flags=flags)


@pytest.mark.parametrize("fmt", ["bogus", None, "e4m3fnuz", "E4M3FN", 3], ids=repr)
def test_a_format_torchs_cpu_gemm_does_not_take_is_refused(fmt):
    for a, b in ((fmt, "e4m3fn"), ("e5m2", fmt)):
        with pytest.raises(ValueError, match=r"torch's CPU _scaled_mm takes float8_e4m3fn / float8_e5m2"):
            cpu_path(a, b, tensorwise=True, flags=AMX)


def test_the_paths_are_as_documented():
    e4, e5 = get_format("e4m3fn"), get_format("e5m2")
    assert cpu_path(e4, "e4m3fn", tensorwise=True, flags=["amx_int8"]) == "torch-cpu-onednn"
    assert cpu_path("e4m3fn", "e4m3fn", tensorwise=True, flags="amx_int8 amx_fp16".split()) == "torch-cpu-onednn"
    assert cpu_path("e4m3fn", e5, tensorwise=True, flags={"amx_int8"}) == "torch-cpu-emulated"
    assert cpu_path("e4m3fn", "e5m2", tensorwise=True, flags=AMX) == "torch-cpu-onednn"
    assert cpu_path("e5m2", "e5m2", tensorwise=True, flags=AMX, mkldnn=False) == "torch-cpu-emulated"
    assert cpu_path("e5m2", "e5m2", tensorwise=True, flags=()) == "torch-cpu-emulated"


def test_torchao_emulated_mm_names_a_bias_that_overflows_the_output_dtype():
    e4 = get_format("e4m3fn")
    a = np.full((2, 4), 0x38, np.uint8)
    b = np.full((4, 2), 0x38, np.uint8)
    one = np.float32(1)
    with pytest.raises(ValueError, match=r"bias overflows float32, the type it is added in"):
        torchao_emulated_mm(a, e4, one, b, e4, one, bias=np.array([1e39, 0.0]))
    with pytest.raises(ValueError, match=r"bias overflows float16, the type it is added in"):
        torchao_emulated_mm(a, e4, one, b, e4, one, bias=np.array([7e4, 0.0]), out_dtype=np.float16)
    out = torchao_emulated_mm(a, e4, one, b, e4, one, bias=np.array([np.inf, 0.5]))
    assert out[0, 0] == np.inf and out[0, 1] == 4.5
