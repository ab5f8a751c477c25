"""The grad-study's per-pair summary of a pair with no probe cell at the last state (its cell file deleted).

``pair_summary`` averaged an empty list: NumPy's "Mean of empty slice" and "invalid value encountered" warnings on
stderr, under ``--quiet`` too; the values are NaN (no cell), without a warning.
"""

import csv
import math
import warnings
from pathlib import Path

from fp8emu.lab import grad_study as gs

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


def _probes():
    with (COMMITTED / "probes.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_pair_without_the_last_state_is_nan_without_a_warning():
    rows = [r for r in _probes() if not (r["recipe"] == "te-block" and r["state"] == "100")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = {r["recipe"] + "@" + r["stack"]: r for r in gs.pair_summary({"probes": rows})}
    block = summary["te-block@h100"]
    assert block["state"] == 100 and all(math.isnan(block[k]) for k in ("fprop", "dgrad", "wgrad", "wgrad_shrink",
                                                                           "wgrad_accum", "model_wgrad_fp32",
                                                                           "model_wgrad_qat"))
    # another pair as before: the mean over its layers (the guide's row: 0.0417 for te-current@h100's wgrad)
    wg = [float(r["rel_err"]) for r in rows if (r["recipe"], r["stack"], r["state"], r["gemm"]) ==
          ("te-current", "h100", "100", "wgrad")]
    assert summary["te-current@h100"]["wgrad"] == sum(wg) / len(wg) and f"{sum(wg) / len(wg):.3g}" == "0.0417"
