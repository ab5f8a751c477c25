"""Repeated keys in the files fp8emu reads, and float32 overflows named as such: each test pins one defect
of an audit and failed before its fix.

Expectations come from the file formats' own rules (the safetensors library where it decides), float32's
limits from NumPy's finfo, and exact enumeration of the recorded question vectors, never from the code
under test.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from fp8emu import readers
from fp8emu.lab import tensors
from fp8emu.testing import golden, plugin

F32_MAX = float(np.finfo(np.float32).max)


# ----------------------------------------------------------------------------- duplicate JSON keys
def _st_file(path, head: bytes, data: int):
    path.write_bytes(struct.pack("<Q", len(head)) + head + bytes(data))
    return path


DUP_TENSOR = (b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
              b'"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}')
DUP_FIELD = b'{"w": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}'
DUP_META = (b'{"__metadata__": {"a": "1", "a": "2"}, '
            b'"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}')


@pytest.mark.parametrize("head, data, key", [(DUP_TENSOR, 8, "w"), (DUP_FIELD, 4, "dtype"),
                                             (DUP_META, 4, "a")], ids=["tensor", "field", "metadata"])
def test_safetensors_header_with_a_key_twice_is_refused(tmp_path, head, data, key):
    """The last entry used to win silently; now one line names the file and the key."""
    p = _st_file(tmp_path / "dup.safetensors", head, data)
    with pytest.raises(ValueError) as exc:
        readers.safetensors_header(p)
    msg = str(exc.value)
    assert msg.startswith(str(p)) and f"key {key!r} appears twice" in msg and "\n" not in msg


def test_the_safetensors_library_refuses_the_first_two_files_too(tmp_path):
    """The reference: safetensors refuses a field twice (its header is a struct) and a tensor named
    twice whose surviving entry leaves data uncovered. (It reads a repeated metadata key, or a tensor
    named twice with identical entries, keeping the last: fp8emu is stricter there.)"""
    st = pytest.importorskip("safetensors.numpy")
    for head, data in ((DUP_TENSOR, 8), (DUP_FIELD, 4)):
        p = _st_file(tmp_path / "ref.safetensors", head, data)
        with pytest.raises(Exception, match="invalid offset|duplicate field"):
            st.load_file(str(p))


def test_unique_keys_at_every_depth_still_read(tmp_path):
    head = (b'{"__metadata__": {"a": "1", "b": "1"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
            b'"v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}')
    entries, meta = readers.safetensors_header(_st_file(tmp_path / "ok.safetensors", head, 8))
    assert sorted(entries) == ["v", "w"] and meta == {"a": "1", "b": "1"}


def test_safetensors_index_with_a_tensor_twice_is_refused(tmp_path):
    head = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    _st_file(tmp_path / "a.safetensors", head, 4)
    _st_file(tmp_path / "b.safetensors", head.replace(b'"w"', b'"v"'), 4)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"metadata": {}, "weight_map": {"w": "a.safetensors", "v": "b.safetensors", '
                     '"w": "b.safetensors"}}')
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json: .*key 'w' appears twice"):
        tensors.discover(tmp_path)


def test_golden_json_with_a_key_twice_is_refused(tmp_path):
    p = tmp_path / "v.json"
    golden.save_golden(p, "e4m3fn")
    text = p.read_text()
    assert text.startswith("{")
    p.write_text('{"format": "e5m2",' + text[1:])     # a second "format" key, the first one lying
    with pytest.raises(ValueError, match=r"v\.json: .*key 'format' appears twice"):
        golden.load_golden(str(p))


def test_snapshot_options_with_a_key_twice_are_refused(tmp_path):
    p = tmp_path / "snap.npz"
    np.savez(p, format_version=np.array(1), format=np.array("e4m3fn"),
             options=np.array('{"saturate": true, "saturate": false}'), codes=np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match=r"snap\.npz\[options\]: .*key 'saturate' appears twice"):
        plugin._read_snapshot(p)


def test_a_huge_repeated_key_is_named_in_one_short_line():
    key = "k" * 10_000
    with pytest.raises(ValueError) as exc:
        readers.parse_json(json.dumps({key: 1})[:-1] + f', "{key}": 2}}', "x.json")
    msg = str(exc.value)
    assert len(msg) < 200 and "10000 characters" in msg and "\n" not in msg


# ----------------------------------------------------------------------------- overflows float32 is not "not finite"
def _qkv():
    rng = np.random.default_rng(53)
    return [rng.standard_normal((1, 4, 8)) for _ in range(3)]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_attention_names_a_float32_overflow_as_one(which):
    """A float64 input that is finite but above float32's largest finite value was "must be finite"."""
    from fp8emu.attention import attention
    ops = _qkv()
    ops[which][0, 1, 2] = 1e39
    name = "qkv"[which]
    with pytest.raises(ValueError) as exc:
        attention(*ops, "fa3-fp8")
    msg = str(exc.value)
    assert msg.startswith(f"{name} overflows float32") and repr(F32_MAX) in msg and "1e+39" in msg
    assert "must be finite" not in msg


def test_a_nan_or_inf_input_is_still_not_finite():
    from fp8emu.attention import attention
    for bad in (np.nan, np.inf):
        ops = _qkv()
        ops[0][0, 0, 0] = bad
        with pytest.raises(ValueError, match="q must be finite"):
            attention(*ops, "fa3-fp8")


def test_the_float32_boundary_is_float32_rounding():
    """Above F32_MAX by less than half its ulp (2**103) rounds to F32_MAX: accepted; by 2**103, Inf: refused."""
    from fp8emu.attention import quantize_qkv
    from fp8emu.codec import decode
    x = np.full((1, 1, 2), F32_MAX + 2.0 ** 102)
    codes = quantize_qkv(x, "e4m3fn", np.array([2.0 ** -120]))
    assert decode(codes, "e4m3fn").tolist() == [[[256.0, 256.0]]]     # 2**7 * (2 - 2**-23) rounds to 2**8
    with pytest.raises(ValueError, match="x overflows float32"):
        quantize_qkv(np.full((1, 1, 2), F32_MAX + 2.0 ** 103), "e4m3fn", np.array([1.0]))


def test_reference_attention_computes_in_float64_and_takes_the_same_input():
    from fp8emu.attention import reference_attention
    ops = _qkv()
    ops[2][0, 1, 2] = 1e39
    out, _ = reference_attention(*ops)
    assert np.all(np.isfinite(out)) and np.max(np.abs(out)) > 1e37


@pytest.mark.parametrize("scale, why", [(1e39, "scale overflows float32"), (1e-50, "scale underflows to 0"),
                                        (-1.0, "scale must be finite and positive"),
                                        (np.nan, "scale must be finite and positive")])
def test_quantize_qkv_scale_says_which_float32_limit(scale, why):
    from fp8emu.attention import quantize_qkv
    with pytest.raises(ValueError, match=why):
        quantize_qkv(np.ones((1, 1, 2)), "e4m3fn", np.array([scale]))


@pytest.mark.parametrize("scale, why", [(1e39, "overflows float32"), (1e-50, "underflows to 0 in float32")])
def test_given_quantizer_scales_say_which_float32_limit(scale, why):
    import fp8emu
    with pytest.raises(ValueError, match=f"scale {why}"):
        fp8emu.quantize_tensorwise(np.ones(4), "e4m3fn", scale=scale)
    with pytest.raises(ValueError, match=f"DelayedScaling.scale {why}"):
        fp8emu.DelayedScaling("e4m3fn").scale = scale


def test_hif4_says_a_float32_overflow_is_one():
    from fp8emu.scaling.hifloat4 import quantize_hif4
    x = np.ones(64)
    x[3] = 1e39
    # every recipe's float32 conversion names the overflow (scaling.tensor.as_f32), without NumPy's cast warning
    with pytest.raises(ValueError, match="overflows? float32"):
        quantize_hif4(x)


def test_block_scaled_mm_names_a_float32_overflow_of_c():
    """A finite float64 accumulator beyond float32's range is an overflow, not 'not finite'."""
    import fp8emu
    a = np.zeros((2, 32), np.uint8)
    b = np.zeros((32, 2), np.uint8)
    sc = np.full((2, 1), 127, np.uint8)
    kw = dict(a_format="e4m3fn", b_format="e4m3fn", a_scales=sc, b_scales=sc.T.copy())
    with pytest.raises(ValueError, match=r"c overflows float32.*1e\+39.*3\.40282e\+38"):
        fp8emu.block_scaled_mm(a, b, c=np.full((2, 2), 1e39), **kw)
    with pytest.raises(ValueError, match="c must be finite; Inf/NaN"):
        fp8emu.block_scaled_mm(a, b, c=np.full((2, 2), np.inf), **kw)
