"""grad-study cells of a reference run that diverged (``GradConfig(lr=1e30)``: NaN weights from the first step).

The other cells give NaN rows, which the findings count ("NaN measurement(s): no verdict"); a ``ksweep`` cell ended
in NumPy's "zero-size array to reduction operation maximum which has no identity" (no entry of a NaN result is "at
least a tenth of the largest"), so the study stopped; a ``fork`` cell's ``weight_dist`` of NaN weights was 0.0, "the
recipe's weights are the float32 fork's" (``NaN > 0`` is False), silently.
"""

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("torch")
from fp8emu.torch.study import grad as G  # noqa: E402

_PAIR = (("te-current", "h100"),)


def _cfg(lr):
    return dataclasses.replace(G.QUICK, lr=lr, ref_steps=3, checkpoints=(3,), fork_at=2, fork_steps=2, ks=(256,),
                               pairs=_PAIR, fork_pairs=_PAIR)


def _cell(cfg, kind):
    return G.run_cell(cfg.as_dict(), next(c for c in G.plan_cells(cfg) if c["kind"] == kind))


def test_the_reference_run_diverges():
    _, states = G.reference_states(_cfg(1e30))
    assert not all(np.isfinite(v.numpy()).all() for v in states[2][0].values())


def test_a_ksweep_cell_of_a_diverged_run_gives_nan_rows():
    (row,) = _cell(_cfg(1e30), "ksweep")["ksweep"]
    assert all(math.isnan(row[k]) for k in ("accum_err", "accum_max_rel", "quant_err", "rel_err"))


def test_a_fork_of_a_diverged_run_has_no_weight_distance():
    rows = _cell(_cfg(1e30), "fork")["forks"]
    assert len(rows) == 3 and all(math.isnan(r["weight_dist"]) and math.isnan(r["loss"]) for r in rows)


def test_a_fork_of_a_finite_run_as_before():
    rows = _cell(_cfg(2e-3), "fork")["forks"]
    assert rows[0]["weight_dist"] == 0.0          # both forks at the checkpoint: no distance
    assert all(math.isfinite(r["weight_dist"]) and r["weight_dist"] > 0 for r in rows[1:])
    (row,) = _cell(_cfg(2e-3), "ksweep")["ksweep"]
    assert 0 < row["accum_max_rel"] < 1
