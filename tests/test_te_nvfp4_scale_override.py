"""``NVFP4Quantizer(scale_override=...)``: Quartet II's per-tensor scale override in TE's pipeline.

TransformerEngine (commit d0067d0da6cb) has no such option; IST-DASLab/Quartet-II (commit
8776a90b7aa0) names it ``scale_override`` and uses ``(17 / 16) * 0.93`` for its backward-pass
quantizers.  Facts read from its ``kernels/csrc/round_four_six.cu`` (``four_six_fp4_kernel``):
the per-tensor decode scale is ``amax * (1 / 448) * (scale_override / 6)`` and the block target
``blockmax * (scale_override / 6)``, divided by that decode scale before the E4M3 cast, so the
override cancels out of the E4M3 block scale and multiplies the decode scale; each element is
``x / (e4m3 * decode)`` cast to E2M1 with saturation.  Its ``EdenSRQuantizer`` refuses the override
with stochastic rounding.

Here: fp8emu against the independent oracle (``tests/te_nvfp4_oracle.py``, which takes the
override as ``amax * scale_override`` for the elements' per-tensor scale) over TE's small shapes,
every option TE's exact tests cover, 0 differing bytes; properties the override must have whatever
the float32 order; and the Quartet II kernel's own order of operations (IEEE reciprocals in place
of its ``rcp.approx.ftz.f32``), which differs from TE's order as often without the override as
with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import te_nvfp4_oracle as oracle  # noqa: E402
from test_te_nvfp4_parity import BF16, CONFIGS, F32, compare, quantize_cases, randn  # noqa: E402

from fp8emu import block_scaled_mm  # noqa: E402
from fp8emu.scaling.nvfp4_te import NVFP4Quantizer, quantize_nvfp4_te  # noqa: E402

F = np.float32
#: Quartet II's backward-pass factor (kernels/python/quartet2/linear.py) and the paper's 0.93.
OVERRIDES = [0.93, (17 / 16) * 0.93, 1.25]
_CASES = [c for c in quantize_cases([(128, 128), (256, 272), (304, 304)])]


@pytest.mark.parametrize("so", OVERRIDES, ids=lambda s: f"so{s:g}")
def test_scale_override_versus_oracle(so):
    compared = differing = 0
    for m, n, dtype, tile_2d, row_scaled, cfg, transpose in _CASES:
        c, d = compare(randn((m, n), dtype, 1), cfg, tile_2d, row_scaled, transpose, scale_override=so)
        compared, differing = compared + c, differing + d
    assert compared > 1_000_000 and differing == 0


def test_scale_override_with_rht_versus_oracle():
    x = randn((256, 272), BF16, 2)
    c, d = compare(x, CONFIGS[0], False, False, transpose=True, rht=True, scale_override=0.93)
    assert c and d == 0


def test_the_override_moves_the_per_tensor_scale_and_keeps_the_block_scales():
    x = randn((256, 512), BF16, 3)
    for kw in ({}, {"with_2d_quantization": True}, {"row_scaled_nvfp4": True}):
        one = quantize_nvfp4_te(x, NVFP4Quantizer(**kw))
        so = quantize_nvfp4_te(x, NVFP4Quantizer(scale_override=0.93, **kw))
        # Quartet II's E4M3 block scale does not depend on the override (up to float32 rounding)
        same = np.count_nonzero(one.block_scale_codes == so.block_scale_codes) / one.block_scale_codes.size
        assert same == 1.0
        ratio = so.scale_inv.astype(np.float64) / one.scale_inv.astype(np.float64)
        assert np.allclose(ratio, 0.93, rtol=2 ** -22, atol=0)
        assert np.allclose(np.asarray(so.global_amax, np.float64),
                           np.asarray(one.global_amax, np.float64) * 0.93, rtol=2 ** -23, atol=0)
        # the block maxima now land near 6 / 0.93 and clip: more elements sit on +-6
        sat = [np.count_nonzero((t.codes & 7) == 7) for t in (one, so)]
        assert sat[1] > sat[0]
    assert np.array_equal(quantize_nvfp4_te(x, NVFP4Quantizer(scale_override=1.0)).codes,
                          quantize_nvfp4_te(x, NVFP4Quantizer()).codes)


def test_a_gemm_of_overridden_operands_matches_their_dequantized_product():
    """global_amax is amax * scale_override, so block_scaled_mm's alpha agrees with dequantize()."""
    g = np.random.default_rng(4)
    a, b = g.standard_normal((32, 64)).astype(F), g.standard_normal((64, 48)).astype(F)
    q = NVFP4Quantizer(scale_override=0.93)
    ta, tb = quantize_nvfp4_te(a, q), quantize_nvfp4_te(b, q, axis=0)
    ref = ta.dequantize().astype(np.float64) @ tb.dequantize().astype(np.float64)
    got = block_scaled_mm(ta, tb, accumulator="exact")
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("kwargs, message", [
    ({"stochastic_rounding": True, "scale_override": 0.93}, "Scale Override is incompatible with Stochastic Rounding"),
    ({"scale_override": 0.0}, "scale_override must be a finite number > 0"),
    ({"scale_override": -0.93}, "scale_override must be a finite number > 0"),
    ({"scale_override": float("nan")}, "scale_override must be a finite number > 0"),
    ({"scale_override": float("inf")}, "scale_override must be a finite number > 0"),
    ({"scale_override": True}, "scale_override must be a finite number > 0"),
    ({"scale_override": "0.93"}, "scale_override must be a finite number > 0"),
])
def test_rejects_what_quartet2_rejects_and_bad_factors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NVFP4Quantizer(**kwargs)


def test_stochastic_rounding_without_override_still_allowed():
    assert NVFP4Quantizer(stochastic_rounding=True, scale_override=1).scale_override == 1.0
    assert NVFP4Quantizer(scale_override=0.93).name == "nvfp4-so0.93"


# --- Quartet II's own order of float32 operations (round_four_six.cu, RTN candidate) ----------

def _e2m1(y):
    c = np.clip(y, F(-6), F(6)).astype(ml_dtypes.float4_e2m1fn)
    return c.view(np.uint8) & 0xF


def quartet2_rtn(x, so):
    """Quartet II's ``rtn_fp4`` kernel (``four_six_fp4_kernel<6.f>``) step by step, with IEEE
    reciprocals where the kernel uses ``rcp.approx.ftz.f32``.  Returns (E2M1 codes, E4M3 codes)."""
    xf = x.astype(F)
    amax = np.abs(xf).max()
    inv_val_max = F(F(so) * F(F(1) / F(6)))
    scale = F(1) if amax == 0 else F(F(amax * F(F(1) / F(448))) * inv_val_max)
    m, n = xf.shape
    blocks = xf.reshape(m, n // 16, 16)
    s_group = (np.abs(blocks).max(-1) * F(F(F(1) / F(6)) * F(so))).astype(F)
    codes, d = oracle.e4m3((s_group * F(F(1) / scale)).astype(F))
    d = np.where(d == 0, F(1), d)
    factor = (F(1) / (d * scale).astype(F)).astype(F)
    return _e2m1((blocks * factor[..., None]).astype(F)).reshape(m, n), codes


def test_quartet2_order_differs_from_te_order_as_much_without_the_override():
    """The override is modelled faithfully: Quartet II's own order departs from TE's already at
    scale_override=1 (division vs reciprocal products), and not markedly more at 0.93."""
    x = randn((1024, 256), BF16, 1)
    diff = {}
    for so in (1.0, 0.93):
        q, c = quartet2_rtn(x, so)
        t = quantize_nvfp4_te(x, NVFP4Quantizer(scale_override=so))
        diff[so] = (np.count_nonzero(q != t.codes), np.count_nonzero(c != t.block_scale_codes))
    assert diff[1.0][0] > 0                            # the orders are not the same computation
    assert diff[0.93][0] <= 2 * diff[1.0][0] and diff[0.93][0] < x.size // 200
