"""Inputs of ``te.DotProductAttention``'s FP8 attention (``fp8_dpa=True``; ``fp8emu.torch.fp8_sdpa``) that were
raw errors (fourteenth audit, part A).

An empty query sequence reached the NumPy path: torch's "cannot reshape tensor of 0 elements into shape
[-1, 4, 0, 16]" (an empty batch had been handled); a meta tensor was NumPy's bare "can't convert meta device
type tensor to numpy"; a float64 query holding 1e39 (finite) was refused as "q must be finite (NaN/Inf inputs
are not modelled)".  Now: an empty output, and one line naming the tensor and what is wrong.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
import fp8emu.torch.te as te  # noqa: E402

FP8 = te.recipe.DelayedScaling(fp8_dpa=True)


def _dpa(q, k=None, fmt="sbhd"):
    dpa = te.DotProductAttention(4, 16, qkv_format=fmt).eval()
    k = q if k is None else k
    with te.autocast(recipe=FP8), torch.no_grad():
        return dpa(q, k, k)


@pytest.mark.parametrize("fmt, shape", [("sbhd", (0, 2, 4, 16)), ("bshd", (2, 0, 4, 16))])
def test_an_empty_query_sequence_gives_an_empty_output(fmt, shape):
    out = _dpa(torch.randn(*shape), fmt=fmt)
    assert out.shape == (*shape[:2], 64) and out.dtype == torch.float32


def test_fp8_sdpa_of_an_empty_query_sequence_has_torchs_shape():
    q = torch.randn(2, 4, 0, 16)
    kv = torch.randn(2, 4, 8, 32)
    with torch.no_grad():
        assert ft.fp8_sdpa()(q, kv[..., :16], kv).shape == torch.nn.functional.scaled_dot_product_attention(
            q, kv[..., :16], kv).shape == (2, 4, 0, 32)


def test_a_meta_input_is_named():
    with pytest.raises(ValueError, match=r"^fp8 attention \(fa3-fp8\): query is a meta tensor \(a shape without "
                                         r"values\)"):
        _dpa(torch.randn(32, 2, 4, 16, device="meta"))


def test_a_float64_input_past_float32_is_named():
    q = torch.randn(32, 2, 4, 16, dtype=torch.float64)
    k = q.clone()
    k[3, 1, 2, 5] = -1e39
    with pytest.raises(ValueError, match=r"^fp8 attention \(fa3-fp8\): key overflows float32.*1 finite float64 "
                                         r"value\(s\).*1e\+39"):
        _dpa(q, k)


def test_float64_inputs_float32_holds_run_as_before():
    q = torch.randn(32, 2, 4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = _dpa(q)
    assert out.dtype == torch.float64 and torch.equal(out, _dpa(q.float()).double())
