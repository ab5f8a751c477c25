"""fp8emu against Transformer Engine's pure-PyTorch FP8 reference quantizers.

``tests/data/te_reference_quantizers.json`` holds digests of the outputs of TE's
``CurrentScalingQuantizerRef`` (``custom_recipes/reference_current_scaling.py``),
``BlockwiseQuantizerReference`` (``tests/pytorch/references/``; 1x128 and
128x128, with and without power-of-two scales, ragged shapes) and its MXFP8
reference (``tests/pytorch/test_mxfp8_2d_quantize.py``), run as written on CPU
PyTorch by ``tools/record_te_reference_quantizers.py`` at TE commit
:data:`fp8emu.scaling.nvfp4_te.TE_COMMIT`, over normal and adversarial inputs
(zeros, subnormal amax, amax at and one ulp around ``fp8_max / 2**k`` for
E4M3 and E5M2 -- per row, and per tensor in the ``current-sweep`` cases --, amax
under eps, Inf, NaN), float32 and bfloat16.  This file recomputes them with
fp8emu's quantizers, without torch:

* ``quantize_tensorwise(x, fmt, pow2=, eps=)`` for current scaling,
* ``quantize_blockwise(x, fmt, block=tile, pow2=, eps=)`` (column-wise 1x128 data:
  the same call on ``x.T``),
* ``quantize_mx(x, "e4m3fn", block=32 or (32, 32), scale_rule="rceil")`` for MXFP8.

Every finite input agrees bit for bit (codes, both directions, and scales), with
one exception below.  The differences, all where TE's reference is not what TE's
CUDA kernels do (fp8emu follows the kernels' ``compute_scale_from_amax`` in
``transformer_engine/common/recipe/recipe_common.cuh``):

1. Current scaling of a bfloat16 input whose ``fp8_max / amax`` overflows
   float32: the reference replaces the infinite scale by ``finfo(x.dtype).max``
   (bfloat16's 3.3895314e38); TE's current-scaling kernel
   (``compute_scale_from_amax_kernel``) and fp8emu use ``FLT_MAX``.  The codes are
   equal, ``scale_inv`` differs; with ``scale=BF16_MAX`` fp8emu gives the
   reference's bits.  (Block scaling does use the input type's maximum, in the
   kernels, the reference and fp8emu alike.)
2. A tensor (current) or block with an Inf: the reference's scale is
   ``fp8_max / inf = 0`` (``scale_inv`` Inf), so the block's finite values become
   0 and the Inf NaN; the kernels and fp8emu use scale 1 and saturate.  MXFP8: the
   E8M0 code is 0xFF in both, the reference divides by ``2**128 = inf``.
3. A NaN: ``torch.amax`` propagates it, so the reference's scale is NaN and every
   code of the block NaN; with power-of-two scales ``frexp(NaN)`` gives exponent
   0, so the scale becomes ``2**-1`` (``scale_inv`` 2) whatever the block holds;
   MXFP8: the E8M0 exponent 255 + 1 wraps to code 0, ``2**-127``, so every finite
   value of the block saturates to +-448 (torch 2.13's e4m3fn cast saturates),
   where fp8emu gives the block E8M0 code 0xFF (NaN).  For current and block
   scaling the kernels' amax ignores NaN, and fp8emu's does too.

Outside the blocks that hold an Inf or NaN, those inputs agree bit for bit
(the ``*_finite`` digests).  ``test_live_*`` run TE's references themselves when
torch is importable and ``FP8EMU_TE_CHECKOUT`` names a TransformerEngine checkout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tools"))
import record_te_reference_quantizers as R  # noqa: E402

import fp8emu  # noqa: E402
from fp8emu.scaling.nvfp4_te import TE_COMMIT  # noqa: E402

VECTORS = json.loads((HERE / "data" / "te_reference_quantizers.json").read_text())
CASES = {cid: (recipe, x, opts) for cid, recipe, x, opts in R.all_cases()}
BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def nonfinite(x):
    return not np.isfinite(np.asarray(x, np.float32)).all()


def bf16_scale_overflow(cid):
    """Current scaling, bfloat16 input, 448/amax or 57344/amax above FLT_MAX, scale not rounded to 2**k."""
    return cid.startswith("current/tiny-bf16-") and cid.endswith("-fp32")


FINITE = sorted(c for c, (_, x, _) in CASES.items() if not nonfinite(x) and not bf16_scale_overflow(c))
NONFINITE = sorted(c for c, (_, x, _) in CASES.items() if nonfinite(x))


def fp8emu_outputs(recipe, x, opts, scale=None):
    """fp8emu's outputs laid out as TE's reference returns them."""
    if recipe == "current_sweep":        # one tensor per slice
        runs = [fp8emu_outputs("current", x[i], opts) for i in range(x.shape[0])]
        return {"codes": np.stack([r["codes"] for r in runs]),
                "scale_inv": np.concatenate([r["scale_inv"] for r in runs])}
    if recipe == "current":
        t = fp8emu.quantize_tensorwise(x, opts["fmt"], pow2=opts["pow2"], eps=opts["eps"], scale=scale)
        s = np.asarray(t.scale_inv, np.float32).reshape(1)
        return {"codes": t.codes, "scale_inv": s, "codes_t": t.codes.T, "scale_inv_t": s}
    if recipe == "block":
        kw = dict(block=opts["tile"], pow2=opts["pow2"], eps=opts["eps"])
        t = fp8emu.quantize_blockwise(x, opts["fmt"], **kw)
        if opts["tile"][0] == 128:       # a square tile: the column-wise data is the transpose
            return {"codes": t.codes, "scale_inv": t.scale_inv, "codes_t": t.codes.T, "scale_inv_t": t.scale_inv.T}
        tt = fp8emu.quantize_blockwise(x.T, opts["fmt"], **kw)
        return {"codes": t.codes, "scale_inv": t.scale_inv, "codes_t": tt.codes, "scale_inv_t": tt.scale_inv}
    if opts["tile"] == (32, 32):
        t = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32), scale_rule="rceil")
        return {"codes": t.codes, "scale_codes": t.scale_codes}
    t = fp8emu.quantize_mx(x, "e4m3fn", block=32, scale_rule="rceil")
    tt = fp8emu.quantize_mx(x.T, "e4m3fn", block=32, scale_rule="rceil")
    return {"codes": t.codes, "scale_codes": t.scale_codes, "codes_t": tt.codes, "scale_codes_t": tt.scale_codes}


def fp8emu_digests(cid, scale=None):
    recipe, x, opts = CASES[cid]
    out = {k: np.ascontiguousarray(v) for k, v in fp8emu_outputs(recipe, x, opts, scale).items()}
    return R.digests(out, x, recipe, opts)


def test_vectors_come_from_the_te_commit_we_follow():
    assert VECTORS["te_commit"] == TE_COMMIT
    assert set(VECTORS["cases"]) == set(CASES)
    recipes = {c.split("/")[0] for c in CASES}
    assert recipes == {"current", "current-sweep", "block1x128", "block128x128", "mxfp8-1x32", "mxfp8-32x32"}
    assert len(FINITE) > 250 and len(NONFINITE) == 2 * 2 * (2 * 2 * 5 + 3)


def test_the_scaling_guide_states_these_counts():
    guide = (HERE.parent / "docs" / "guides" / "scaling.md").read_text()
    assert f"outputs of {len(CASES)} cases" in guide
    assert f"\n{len(NONFINITE)} cases with an Inf or a NaN" in guide
    edges = R.amax_edges()
    assert f"per tensor in {edges.size} small tensors" in guide
    wanted = {np.float32(448 * 2.0**-12), np.float32(57344 * 2.0**11), np.nextafter(np.float32(448), np.float32(0))}
    assert wanted <= set(edges.tolist())


@pytest.mark.parametrize("cid", FINITE)
def test_finite_inputs_match_te_reference(cid):
    assert fp8emu_digests(cid) == VECTORS["cases"][cid]


@pytest.mark.parametrize("cid", sorted(c for c in CASES if bf16_scale_overflow(c)))
def test_bf16_scale_overflow_differs_only_by_the_reference_value_for_inf(cid):
    ours, theirs = fp8emu_digests(cid), VECTORS["cases"][cid]
    assert {k for k in theirs if ours[k] != theirs[k]} == {"scale_inv", "scale_inv_t"}
    # the reference's scale: bfloat16's largest value where the kernel (and fp8emu) take FLT_MAX
    assert fp8emu_digests(cid, scale=BF16_MAX) == theirs


@pytest.mark.parametrize("cid", NONFINITE)
def test_nonfinite_inputs_match_outside_their_blocks(cid):
    ours, theirs = fp8emu_digests(cid), VECTORS["cases"][cid]
    assert {k: v for k, v in ours.items() if k.endswith("_finite")} == \
           {k: v for k, v in theirs.items() if k.endswith("_finite")}
    differing = {k for k in theirs if not k.endswith("_finite") and ours[k] != theirs[k]}
    if cid.startswith("mxfp8") and "/inf-" in cid:     # same E8M0 0xFF; the reference divides by inf
        assert differing == {k for k in theirs if k.startswith("codes") and not k.endswith("_finite")}
    else:                                              # scale 0 (Inf) or NaN (NaN) in the reference
        assert differing == {k for k in theirs if not k.endswith("_finite")}


def test_a_changed_byte_changes_the_digest():
    cid = FINITE[0]
    recipe, x, opts = CASES[cid]
    out = fp8emu_outputs(recipe, x, opts)
    codes = np.ascontiguousarray(out["codes"]).copy()
    codes.flat[7] ^= 1
    assert R.digest(codes) != VECTORS["cases"][cid]["codes"]


def test_recorder_refuses_a_path_that_is_not_a_te_checkout(tmp_path, capsys):
    pytest.importorskip("torch")
    assert R.main([str(tmp_path), "--out", str(tmp_path / "v.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "v.json").exists()


# ----------------------------------------------------------------------------- live TE
@pytest.fixture(scope="module")
def refs():
    path = os.environ.get("FP8EMU_TE_CHECKOUT")
    if not path:
        pytest.skip("set FP8EMU_TE_CHECKOUT to a TransformerEngine checkout to run TE's references live")
    pytest.importorskip("torch")
    return R.load_all(path)


def mismatches(refs, cid):
    """{output: (differing elements, differing elements outside Inf/NaN blocks, elements)} against live TE."""
    recipe, x, opts = CASES[cid]
    theirs = R.run_reference(refs, recipe, x, opts)
    ours = {k: np.ascontiguousarray(v) for k, v in fp8emu_outputs(recipe, x, opts).items()}
    masked_t, masked_o = R.finite_parts(theirs, x, recipe, opts), R.finite_parts(ours, x, recipe, opts)
    out = {}
    for k in theirs:
        assert theirs[k].shape == ours[k].shape and theirs[k].dtype == ours[k].dtype, k
        bits = np.uint32 if theirs[k].dtype == np.float32 else np.uint8       # one count per element
        a, b = theirs[k].view(bits), ours[k].view(bits)
        fa, fb = masked_t[k + "_finite"].view(bits), masked_o[k + "_finite"].view(bits)
        out[k] = (int(np.count_nonzero(a != b)), int(np.count_nonzero(fa != fb)), theirs[k].size)
    return out


@pytest.mark.parametrize("cid", FINITE[::9] + NONFINITE[::3])
def test_live_reference(refs, cid):
    counts = mismatches(refs, cid)
    assert all(outside == 0 for _, outside, _ in counts.values()), counts
    if cid in FINITE:
        assert all(n == 0 for n, _, _ in counts.values()), counts


def test_live_reference_nonfinite_semantics(refs):
    """What TE's reference does in a block with an Inf or a NaN (the differences stated above)."""
    recipe, x, opts = CASES["block1x128/inf-4x256-f32-e4m3fn-fp32"]
    r = R.run_reference(refs, recipe, x, opts)
    assert np.isinf(r["scale_inv"][0, 0]) and r["codes"][0, 1] & 0x7F == 0x7F      # Inf * 0 is NaN
    assert (r["codes"][0, :128][np.arange(128) != 1] & 0x7F == 0).all()            # finite * 0 is +-0
    recipe, x, opts = CASES["block128x128/nan-256x256-bf16-e5m2-fp32"]
    r = R.run_reference(refs, recipe, x, opts)
    assert np.isnan(r["scale_inv"][0, 0]) and (r["codes"][:128, :128] & 0x7F > 0x7C).all()
    # with power-of-two scales, frexp(NaN) gives exponent 0, so the NaN scale becomes 2**-1
    recipe, x, opts = CASES["block128x128/nan-256x256-bf16-e5m2-pow2"]
    r = R.run_reference(refs, recipe, x, opts)
    assert r["scale_inv"][0, 0] == 2 and np.count_nonzero(r["codes"][:128, :128] & 0x7F > 0x7C) == 1
    recipe, x, opts = CASES["mxfp8-32x32/nan-64x96-f32"]
    r = R.run_reference(refs, recipe, x, opts)
    # E8M0 code 0 (2**-127): torch's e4m3fn cast saturates every finite value to +-448, the NaN stays
    assert r["scale_codes"][0, 0] == 0 and r["scale_codes"][0, 1] != 0
    assert sorted(np.unique(r["codes"][:32, :32] & 0x7F)) == [0x7E, 0x7F]
    assert np.count_nonzero(r["codes"][:32, :32] & 0x7F == 0x7F) == np.isnan(x[:32, :32]).sum() == 1
    t = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32), scale_rule="rceil")
    assert t.scale_codes[0, 0] == 0xFF                 # fp8emu: a NaN E8M0 scale for the block


def test_live_bf16_scale_overflow(refs):
    cid = "current/tiny-bf16-e4m3fn-fp32"
    recipe, x, opts = CASES[cid]
    r = R.run_reference(refs, recipe, x, opts)
    assert r["scale_inv"][0] == np.float32(1) / np.float32(BF16_MAX)
    counts = mismatches(refs, cid)
    assert counts["codes"][0] == 0 and counts["scale_inv"][0] == 1
