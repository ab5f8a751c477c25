"""fp8emu against vectors recorded from Transformer Engine's own NVFP4 reference quantizer.

``tests/data/te_nvfp4_vectors.json`` holds digests of the outputs of TE's
``NVFP4QuantizerRef`` (``reference_nvfp4.py``, run as written on CPU PyTorch by
``tools/record_te_vectors.py``) for every case of ``test_te_nvfp4_parity.py``.
This test recomputes them with :func:`fp8emu.scaling.quantize_nvfp4_te`, without
torch; a digest equal means every E2M1 code, E4M3 scale byte and amax bit is equal.
``test_live_reference`` runs TE's reference itself when torch is importable and
``FP8EMU_TE_CHECKOUT`` names a TransformerEngine checkout (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))
import record_te_vectors as R  # noqa: E402

from fp8emu.scaling.nvfp4_te import TE_COMMIT, NVFP4Quantizer, quantize_nvfp4_te  # noqa: E402

VECTORS = json.loads((HERE / "data" / "te_nvfp4_vectors.json").read_text())
CASES = {cid: (x, kw) for cid, x, kw in R.all_cases()}


def fp8emu_outputs(x, tile_2d=False, row_scaled=False, use_4over6=False, e4m3_max=448, err_mode="MAE",
                   fast=False, rht=False, sign_mask=True, rowwise=True, columnwise=True):
    """fp8emu's outputs laid out as the reference returns them: {direction: (codes, scale bytes, amax)}."""
    out = {}
    for d, axis, wanted in (("row", -1, rowwise), ("col", 0, columnwise)):
        if not wanted:
            continue
        col_rht = rht and d == "col"           # TE transforms the column-wise copy only
        q = NVFP4Quantizer(with_2d_quantization=tile_2d, row_scaled_nvfp4=row_scaled, nvfp4_use_4over6=use_4over6,
                           nvfp4_e4m3_max=e4m3_max if use_4over6 else 448, nvfp4_4over6_err_mode=err_mode,
                           nvfp4_4over6_err_use_fast_math=fast, with_rht=col_rht,
                           with_random_sign_mask=sign_mask if col_rht else True)
        t = quantize_nvfp4_te(x, q, axis=axis)
        codes, scales = (t.codes, t.block_scale_codes) if axis == -1 else (t.codes.T, t.block_scale_codes.T)
        if tile_2d:                            # the reference repeats a tile's scale on each of its rows
            scales = np.repeat(scales, 16, axis=0)[:codes.shape[0]]
        out[d] = (codes, scales, np.asarray(t.global_amax, np.float32).reshape(-1))
    return out


def test_vectors_come_from_the_te_commit_we_follow():
    assert VECTORS["te_commit"] == TE_COMMIT
    assert set(VECTORS["cases"]) == set(CASES)


@pytest.mark.parametrize("cid", sorted(CASES))
def test_matches_recorded_te_reference(cid):
    x, kw = CASES[cid]
    assert R.digests(fp8emu_outputs(x, **kw)) == VECTORS["cases"][cid]


def test_a_changed_byte_changes_the_digest():
    x, kw = CASES[sorted(CASES)[0]]
    out = fp8emu_outputs(x, **kw)
    d, (codes, scales, amax) = next(iter(out.items()))
    codes = codes.copy()
    codes.flat[123] ^= 1
    assert R.digests({d: (codes, scales, amax)}) != VECTORS["cases"][sorted(CASES)[0]]


def _live():
    path = os.environ.get("FP8EMU_TE_CHECKOUT")
    if not path:
        pytest.skip("set FP8EMU_TE_CHECKOUT to a TransformerEngine checkout to run TE's reference live")
    pytest.importorskip("torch")
    return R.load_reference(path)


@pytest.mark.parametrize("cid", [c for c in sorted(CASES) if "128x128" in c or c.startswith("rht/")][::7])
def test_live_reference(cid):
    ref, utils = _live()
    x, kw = CASES[cid]
    theirs, ours = R.run_reference(ref, utils, x, **kw), fp8emu_outputs(x, **kw)
    assert theirs.keys() == ours.keys()
    for d in theirs:
        for a, b in zip(theirs[d], ours[d]):
            assert a.shape == b.shape and np.count_nonzero(a.view(np.uint8) != b.view(np.uint8)) == 0


def test_recorder_refuses_a_path_that_is_not_a_te_checkout(tmp_path, capsys):
    assert R.main([str(tmp_path), "--out", str(tmp_path / "v.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "v.json").exists()
