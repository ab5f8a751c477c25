"""The gradient study's numbers, verdict rules, tables, figures and report (``fp8emu/lab/grad_study.py``):
what the issue-53 mutation samples of the module found untested (tests/MUTATION.md, "The torch
adapter's linear layer and the same-state probes: fresh samples").

Expectations are written out by hand from the module's documented definitions (exact small vectors,
least squares worked by hand, each verdict rule as printed in its ``rule`` text), never taken from the
module's own output.  Torch-free; the figures need matplotlib."""

import base64
import math
import re
import statistics
import struct

import numpy as np
import pytest

from fp8emu.lab import grad_metrics as gm
from fp8emu.lab import grad_study as gs


# ----------------------------------------------------------------------------- metrics
def test_compare_on_a_hand_worked_vector():
    # a = (2, 2, 1), r = (1, 2, 2): a - r = (1, 0, -1), |a - r| = sqrt 2, |r| = |a| = 3, <a, r> = 8, <a - r, r> = -1
    m = gm.compare(np.array([[2.0, 2.0, 1.0]]), [1.0, 2.0, 2.0])
    assert m["rel_err"] == pytest.approx(math.sqrt(2) / 3, rel=1e-15)
    assert m["cosine"] == pytest.approx(8 / 9, rel=1e-15)
    assert m["shrink"] == pytest.approx(-1 / 9, rel=1e-15)
    # a zero result: all error, no direction, shrunk by the whole reference
    z = gm.compare(np.zeros(3), [1.0, 2.0, 2.0])
    assert (z["rel_err"], z["shrink"]) == (1.0, -1.0) and math.isnan(z["cosine"])
    for a, r in (([1.0, np.inf], [1.0, 1.0]), ([1.0, np.nan], [1.0, 1.0]), ([1.0, 1.0], [0.0, 0.0])):
        assert all(math.isnan(v) for v in gm.compare(a, r).values()), (a, r)
    with pytest.raises(ValueError, match=r"compare: shapes differ \(3 against 2 elements\)"):
        gm.compare(np.ones(3), np.ones(2))
    assert gm.norm([[1.0, 2.0], [2.0, 4.0]]) == 5.0


def test_loglog_slope_keeps_the_positive_finite_points_only():
    # (1, 3) and (4, 12) are kept: slope log(4) / log(4) = 1; y = 0, y = NaN and x = -2 are left out
    assert gm.loglog_slope([1, 2, 4, 8, -2], [3, 0, 12, np.nan, 5]) == pytest.approx(1.0)
    assert gm.loglog_slope([1, 2, 4], [1.0, 0.25, 1 / 16]) == pytest.approx(-2.0)
    assert math.isnan(gm.loglog_slope([1, 2], [1.0, 0.0]))          # one point left
    assert math.isnan(gm.loglog_slope([], []))


def test_fit_floor_keeps_both_parts_non_negative():
    ns = [1, 2, 4, 8]
    # err^2 = 0.04 / n: no floor
    b, v = gm.fit_floor(ns, [math.sqrt(0.04 / n) for n in ns])
    assert b == pytest.approx(0.0, abs=1e-7) and v == pytest.approx(0.04)
    # constant err^2 = 0.01: all floor
    b, v = gm.fit_floor(ns, [0.1] * 4)
    assert b == pytest.approx(0.1) and v == pytest.approx(0.0, abs=1e-12)
    # err^2 = 0.01, 0.02, 0.03, 0.04 grows with n: the free fit's v is negative; with v = 0 the best floor is
    # the mean, b^2 = 0.025 (residual 5e-4), better than b = 0 with the best v (residual > 1e-3)
    b, v = gm.fit_floor(ns, [math.sqrt(e) for e in (0.01, 0.02, 0.03, 0.04)])
    assert b == pytest.approx(math.sqrt(0.025)) and v == 0.0


# ----------------------------------------------------------------------------- verdict rules, hand-made rows
def _by(rows):
    return {r["finding"]: r for r in rows}


def _draws(plain, outliers):
    """wgrad draws of (RHT, no-RHT) per case; a dgrad row and another recipe that the rule must ignore."""
    rows = []
    for case, (rht, no) in (("plain", plain), ("outliers", outliers)):
        for recipe, errs in (("te-nvfp4", rht), ("te-nvfp4-no-rht", no)):
            rows += [{"case": case, "draw": i, "gemm": "wgrad", "recipe": recipe, "rel_err": e}
                     for i, e in enumerate(errs)]
    rows.append({"case": "plain", "draw": 0, "gemm": "dgrad", "recipe": "te-nvfp4", "rel_err": 50.0})
    rows.append({"case": "plain", "draw": 0, "gemm": "wgrad", "recipe": "te-mxfp8", "rel_err": 50.0})
    return {"draws": rows}


def test_finding_c_compares_the_mean_error_with_and_without_rht_in_both_cases():
    c = _by(gs.findings(_draws(([0.08, 0.10], [0.10, 0.10]), ([0.18, 0.18], [0.2, 0.2]))))["c"]
    assert c["verdict"] == "reproduced" and c["value"] == pytest.approx(0.9)
    sd = statistics.stdev([0.08, 0.10])
    assert c["measured"] == ("wgrad rel. error per draw, RHT vs no RHT, "
                             f"plain: 0.09+-{sd:.2g} vs 0.1+-0 (x0.90); outliers: 0.18+-0 vs 0.2+-0 (x0.90)")
    assert _by(gs.findings(_draws(([0.11], [0.1]), ([0.22], [0.2]))))["c"]["verdict"] == "contradicted"
    # one case each way, or one at the threshold: not decided
    assert _by(gs.findings(_draws(([0.08], [0.1]), ([0.22], [0.2]))))["c"]["verdict"] == "not at this scale"
    # (means of one draw are the draws themselves: ratios 0.95 and 1.05 exactly, the thresholds excluded)
    assert _by(gs.findings(_draws(([0.95], [1.0]), ([0.9], [1.0]))))["c"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_draws(([1.0501], [1.0]), ([1.05], [1.0]))))["c"]["verdict"] == "not at this scale"
    # a one-draw spread is NaN, a zero no-RHT error leaves no ratio
    assert "0.1+-nan vs" in _by(gs.findings(_draws(([0.1], [0.2]), ([0.1], [0.2]))))["c"]["measured"]
    zero = _by(gs.findings(_draws(([0.1], [0.0]), ([0.1], [0.2]))))["c"]
    assert zero["verdict"] == "not at this scale" and math.isnan(zero["value"]) and zero["measured"] != "not run"
    # no wgrad draws at all: not run
    assert _by(gs.findings({"draws": [{"case": "plain", "draw": 0, "gemm": "dgrad", "recipe": "te-nvfp4",
                                        "rel_err": 0.1}]}))["c"]["measured"] == "not run"


def _ksweep(fast, split, ks=(256, 1024, 4096)):
    rows = []
    for stack, errs in (("h100-fast", fast), ("h100", split)):
        rows += [{"K": k, "stack": stack, "gemm": "wgrad", "accum_err": e, "accum_max_rel": 2 * e}
                 for k, e in zip(ks, errs)]
    rows.append({"K": 8192, "stack": "h100-fast", "gemm": "fprop", "accum_err": 1e-9, "accum_max_rel": 1e-9})
    return {"ksweep": list(reversed(rows))}         # the rule sorts by K


def test_finding_d_reads_fasts_slope_against_k_and_the_split_at_the_largest_k():
    # fast grows like K^0.5 (x2 per x4 in K); the split at K = 4096 is 0.1 of fast's
    d = _by(gs.findings(_ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 4e-4])))["d"]
    assert d["verdict"] == "reproduced" and d["value"] == pytest.approx(0.5)
    assert d["measured"] == ("wgrad accumulation error at K = 4096: fast 0.004 (largest entry error 0.008), "
                             "split 0.0004 (0.0008); fast's slope against K 0.50")
    # the split at a quarter of fast's exactly still bounds it
    assert _by(gs.findings(_ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 1e-3])))["d"]["verdict"] == "reproduced"
    assert _by(gs.findings(_ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 4e-3])))["d"]["verdict"] == "contradicted"
    # fast flat (slope 0): not decided; the split above a quarter of fast's: not decided
    assert _by(gs.findings(_ksweep([1e-3] * 3, [1e-5] * 3)))["d"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 2e-3])))["d"]["verdict"] == "not at this scale"
    assert _by(gs.findings({}))["d"]["measured"] == "not run"


def _eden(sr_mse, eden_mse, eden_curve, sr_curve=(0.3, 0.3, 0.3, 0.3)):
    ops = [{"finding": "f", "case": "grad_output", "variant": v, "metric": "rel_mse", "value": x}
           for v, x in (("sr-rht", sr_mse), ("ms-eden-rht", eden_mse))]
    ops.append({"finding": "f", "case": "grad_output", "variant": "sr-rht", "metric": "other", "value": 99.0})
    bias = [{"case": "eden", "recipe": r, "level": "operand", "n": n, "rel_err_mean": e}
            for r, curve in (("ms-eden-rht", eden_curve), ("sr-rht", sr_curve)) for n, e in zip((1, 4, 16, 64), curve)]
    return {"operands": ops, "bias": bias}


def test_finding_f_needs_twice_lower_error_and_an_unbiased_mean():
    unbiased = [0.2 / math.sqrt(n) for n in (1, 4, 16, 64)]
    f = _by(gs.findings(_eden(0.02, 0.01, unbiased)))["f"]
    assert f["verdict"] == "reproduced" and f["value"] == pytest.approx(2.0)
    assert f["measured"] == ("relative MSE: SR 0.02, MS-EDEN 0.01 (x2.00 lower); MS-EDEN mean error 0.2 -> 0.025 "
                             "over N = 1..64 (slope -0.50; SR 0.3)")
    assert _by(gs.findings(_eden(0.019, 0.01, unbiased)))["f"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_eden(0.02, 0.01, [0.2] * 4)))["f"]["verdict"] == "not at this scale"     # biased
    assert _by(gs.findings(_eden(0.009, 0.01, unbiased)))["f"]["verdict"] == "contradicted"
    assert _by(gs.findings(_eden(0.01, 0.01, unbiased)))["f"]["verdict"] == "not at this scale"
    assert _by(gs.findings({"operands": _eden(0.02, 0.01, unbiased)["operands"]}))["f"]["measured"] == "not run"


def _mx(sat_floor, sat_ceil, err_floor, err_ceil):
    rows = []
    for variant, sat, err in (("floor", sat_floor, err_floor), ("rceil", sat_ceil, err_ceil)):
        rows.append({"finding": "g", "case": "grad_output", "variant": variant, "metric": "frac_saturated",
                     "value": sat})
        # two layers' errors: the rule takes their mean
        rows += [{"finding": "g", "case": "wgrad", "variant": variant, "metric": "rel_err", "value": e}
                 for e in (err * 0.5, err * 1.5)]
    return {"operands": rows}


def test_finding_g_needs_floor_to_saturate_and_round_up_not_to_with_no_larger_error():
    g = _by(gs.findings(_mx(0.01, 0.0, 0.1, 0.08)))["g"]
    assert g["verdict"] == "reproduced" and g["value"] == pytest.approx(0.8)
    assert g["measured"] == ("grad_output saturated: floor 0.01, round-up 0; wgrad rel. error floor 0.1, "
                             "round-up 0.08 (x0.800)")
    assert _by(gs.findings(_mx(0.01, 0.0, 0.1, 0.1)))["g"]["verdict"] == "reproduced"       # equal: at most 1 x
    assert _by(gs.findings(_mx(0.0, 0.0, 0.1, 0.08)))["g"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_mx(0.01, 0.001, 0.1, 0.08)))["g"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_mx(0.01, 0.0, 0.1, 0.104)))["g"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_mx(0.01, 0.0, 0.1, 0.106)))["g"]["verdict"] == "contradicted"
    at = _by(gs.findings(_mx(0.01, 0.0, 1.0, 1.05)))["g"]          # 1.05 x floor's exactly: not above it
    assert at["value"] == 1.05 and at["verdict"] == "not at this scale"
    assert _by(gs.findings({}))["g"]["measured"] == "not run"
    # either wgrad error missing is a run that did not happen
    for variant in ("floor", "rceil"):
        part = {"operands": [r for r in _mx(0.01, 0.0, 0.1, 0.08)["operands"]
                             if (r["case"], r["variant"]) != ("wgrad", variant)]}
        assert _by(gs.findings(part))["g"]["measured"] == "not run", variant


def _mismatch(two, one):
    return {"operands": [{"finding": "b", "case": f"l{i}", "variant": v, "metric": "weight_mismatch", "value": x}
                         for v, xs in (("te-nvfp4", two), ("te-nvfp4-no-2d", one)) for i, x in enumerate(xs)]}


def test_finding_b_takes_the_worst_2d_and_the_best_1x16_layer():
    b = _by(gs.findings(_mismatch([0.0, 1e-8], [0.2, 0.05])))["b"]
    assert b["verdict"] == "reproduced" and b["value"] == 0.05
    assert b["measured"] == "|Q_fprop(W) - Q_dgrad(W)| / |W|: 2-D 1e-08 (max over layers), 1x16 0.05 (min over layers)"
    assert _by(gs.findings(_mismatch([0.0, 1e-7], [0.2, 1e-3])))["b"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_mismatch([0.0, 2e-7], [0.2, 0.05])))["b"]["verdict"] == "contradicted"
    assert _by(gs.findings(_mismatch([0.0], [])))["b"]["measured"] == "not run"


def _bias(sr_op, rn_op, sr_w, rn_w):
    ns = (1, 4, 16, 64)
    rows = []
    for recipe, level, errs in (("te-nvfp4-no-rht", "operand", sr_op), ("te-nvfp4-no-rht-no-sr", "operand", rn_op),
                                ("te-nvfp4", "wgrad", sr_w), ("te-nvfp4-no-sr", "wgrad", rn_w)):
        rows += [{"case": "plain", "recipe": recipe, "level": level, "n": n, "rel_err_mean": e}
                 for n, e in zip(ns, errs)]
    return {"bias": list(reversed(rows))}


def test_finding_a_between_reproduced_and_contradicted():
    unbiased = [0.2 / math.sqrt(n) for n in (1, 4, 16, 64)]
    wg = [math.sqrt(0.01 + 0.04 / n) for n in (1, 4, 16, 64)]          # floor 0.1
    a = _by(gs.findings(_bias(unbiased, [0.15] * 4, wg, [0.2] * 4)))["a"]
    assert a["verdict"] == "reproduced"
    assert a["measured"] == ("grad_output mean error 0.2 -> 0.025 over N = 1..64 (slope -0.50; RNE 0.15); "
                             f"wgrad {wg[0]:.3g} -> {wg[-1]:.3g}, bias floor 0.1 vs no-SR 0.2")
    # the floor not below 0.8 x no-SR's error (0.1 against 0.12), SR still better: not decided
    assert _by(gs.findings(_bias(unbiased, [0.15] * 4, wg, [0.12] * 4)))["a"]["verdict"] == "not at this scale"
    # a slope of -1 (outside [-0.65, -0.35]), SR better: not decided
    fast = [0.2 / n for n in (1, 4, 16, 64)]
    assert _by(gs.findings(_bias(fast, [0.15] * 4, wg, [0.2] * 4)))["a"]["verdict"] == "not at this scale"
    # a flat SR curve (slope 0: biased, above -0.35) or a growing one, SR still better: not decided
    for curve in ([0.1] * 4, [0.1 * n ** 0.25 for n in (1, 4, 16, 64)]):
        assert _by(gs.findings(_bias(curve, [0.5] * 4, wg, [0.2] * 4)))["a"]["verdict"] == "not at this scale"
    # SR's wgrad at the last N (0.103) no better than no-SR's last (0.1), though below its first (0.3): contradicted
    assert _by(gs.findings(_bias(unbiased, [0.15] * 4, wg, [0.3, 0.2, 0.15, 0.1])))["a"]["verdict"] == "contradicted"
    # the operand's SR no better than RNE at the last N: contradicted
    assert _by(gs.findings(_bias(fast, [0.2 / 64] * 4, wg, [0.2] * 4)))["a"]["verdict"] == "contradicted"
    # the comparison is at the last N only: SR (0.003) below RNE's last (0.01), though its N = 4 error (0.05) is
    # above it, and though RNE's N = 4 error (0.001) is below SR's last: not contradicted (the slope of -1 decides)
    assert _by(gs.findings(_bias(fast, [0.01] * 4, wg, [0.2] * 4)))["a"]["verdict"] == "not at this scale"
    assert _by(gs.findings(_bias(fast, [0.01, 0.001, 0.01, 0.01], wg, [0.2] * 4)))["a"]["verdict"] == \
        "not at this scale"
    assert _by(gs.findings(_bias(unbiased, [], wg, [0.2] * 4)))["a"]["measured"] == "not run"


def _spike(delayed_err_at=0.9, off=range(3, 7), current_off=(), current_err_at=0.03):
    rows, spike_err = [], {"te-delayed": delayed_err_at, "te-current": current_err_at}
    for recipe, offs in (("te-delayed", off), ("te-current", current_off)):
        for step in range(10):
            at = spike_err[recipe] if step == 2 else 0.03 + step / 1000
            rows.append({"recipe": recipe, "history": 4, "step": step, "spiked": str(step == 2),
                         "fprop_rel_err": at, "frac_saturated": 0.0,
                         "frac_underflow": 0.006 if step in offs else 0.0001 * (step % 2)})
    return list(reversed(rows))


def test_spike_summary_by_its_documented_rules():
    s = gs.spike_summary(_spike())
    d = s["te-delayed"]
    # before the spike: step 1 only (0 is the scale-1 step): median 0.031, underflow limit 2 x 1e-4 + 1e-3
    assert (d["spike"], d["history"], d["saturated"], d["off"]) == (2, 4, True, 4)
    assert d["err_before"] == pytest.approx(0.031) and d["err_at"] == 0.9
    assert d["under_after"] == 0.006 and d["err_after"] == pytest.approx(0.039)
    c = s["te-current"]
    assert (c["saturated"], c["off"]) == (False, 0)
    # a larger factor: the delayed spike (0.9 against 0.031) is not saturated beyond 30 x
    assert gs.spike_summary(_spike(), factor=30)["te-delayed"]["saturated"] is False
    # twice the median before exactly is not above it
    assert gs.spike_summary(_spike(delayed_err_at=0.062))["te-delayed"]["saturated"] is False
    assert gs.spike_summary(_spike(delayed_err_at=0.0621))["te-delayed"]["saturated"] is True
    # an underflow exactly at the limit is not off
    rows = _spike()
    for r in rows:
        if r["recipe"] == "te-delayed" and r["step"] == 5:
            r["frac_underflow"] = 2 * 0.0001 + 1e-3
    assert gs.spike_summary(rows)["te-delayed"]["off"] == 3


def test_finding_e_between_reproduced_and_contradicted():
    e = _by(gs.findings({"spike": _spike()}))["e"]
    assert e["verdict"] == "reproduced" and e["value"] == 4.0
    assert e["measured"] == ("delayed (history 4): fprop error 0.031 before, 0.9 at the spike (saturated), then 4 "
                             "steps with up to 0.006 of the input underflowing (error <= 0.039); current: 0.03 at "
                             "the spike, 0 steps off")
    # history +- 1 steps off still reproduces; 2 more does not
    assert _by(gs.findings({"spike": _spike(off=range(3, 8))}))["e"]["verdict"] == "reproduced"
    assert _by(gs.findings({"spike": _spike(off=range(3, 6))}))["e"]["verdict"] == "reproduced"
    assert _by(gs.findings({"spike": _spike(off=range(3, 9))}))["e"]["verdict"] == "not at this scale"
    # current off for one step is allowed, two are not; current saturating is not allowed
    assert _by(gs.findings({"spike": _spike(current_off=(3,))}))["e"]["verdict"] == "reproduced"
    assert _by(gs.findings({"spike": _spike(current_off=(3, 4))}))["e"]["verdict"] == "not at this scale"
    assert _by(gs.findings({"spike": _spike(current_err_at=0.9)}))["e"]["verdict"] == "not at this scale"
    # delayed off for one step and not saturated: contradicted; saturated only: not decided
    assert _by(gs.findings({"spike": _spike(0.03, off=(3,))}))["e"]["verdict"] == "contradicted"
    assert _by(gs.findings({"spike": _spike(0.9, off=())}))["e"]["verdict"] == "not at this scale"
    assert _by(gs.findings({"spike": _spike(0.03, off=(3, 4))}))["e"]["verdict"] == "not at this scale"


@pytest.mark.parametrize("key, tables", [
    ("e", {"spike": [dict(r, frac_saturated="nan") if (r["recipe"], r["step"]) == ("te-delayed", 7) else r
                     for r in _spike()]}),
    ("f", _eden(0.02, 0.01, [0.2, math.nan, 0.05, 0.025])),
    ("g", _mx(math.nan, 0.0, 0.1, 0.08)),
])
def test_a_nan_among_the_e_f_g_measurements_gives_no_verdict(key, tables):
    row = _by(gs.findings(tables))[key]
    assert row["verdict"] == "not at this scale" and math.isnan(row["value"])
    assert row["measured"].endswith("; 1 NaN measurement(s): no verdict") and not row["measured"].startswith("not run")


def test_every_findings_row_names_its_claim_paper_and_rule():
    rows = gs.findings({})
    assert [r["finding"] for r in rows] == list("abcdefg")
    for r in rows:
        assert r["claim"] == gs.CLAIMS[r["finding"]] and r["paper"] == gs.PAPERS[r["finding"]]
        assert r["rule"] and r["measured"] == "not run" and math.isnan(r["value"])
    assert "history +- 1 steps" in rows[4]["rule"] and "arXiv 2601.22813" in rows[5]["paper"]


# ----------------------------------------------------------------------------- tables, summary, README
def _probes():
    rows = []
    for state in (0, 2):
        for layer, k in (("l0", 1.0), ("l1", 3.0)):
            for gemm, g in (("fprop", 1), ("dgrad", 2), ("wgrad", 4)):
                rows.append({"state": state, "recipe": "te-current", "stack": "h100", "layer": layer, "gemm": gemm,
                             "rel_err": k * g * (state + 1) / 100, "cosine": 1.0, "shrink": -k * g / 1000,
                             "rel_err_mean": "", "draws": 4, "quant_err": k * g / 200, "accum_err": k * g / 10_000,
                             "model_rel_err_fp32": k * g / 50, "model_rel_err_qat": k * g / 500,
                             "qat_rel_err_fp32": "nan"})
    return rows


def test_pair_summary_averages_the_layers_at_the_last_state():
    (s,) = gs.pair_summary({"probes": _probes()})
    # at state 2 the layers' factors 1 and 3 average to 2
    assert (s["recipe"], s["stack"], s["state"]) == ("te-current", "h100", 2)
    assert s["fprop"] == pytest.approx(0.06) and s["dgrad"] == pytest.approx(0.12) and s["wgrad"] == pytest.approx(0.24)
    assert s["wgrad_shrink"] == pytest.approx(-0.008) and s["wgrad_accum"] == pytest.approx(0.0008)
    assert s["model_wgrad_fp32"] == pytest.approx(0.16) and s["model_wgrad_qat"] == pytest.approx(0.016)
    assert gs.pair_summary({}) == []


def test_csv_roundtrip_and_the_guide_and_readme_text(tmp_path):
    gs.write_csv(tmp_path / "probes.csv", _probes())
    gs.write_csv(tmp_path / "spike.csv", _spike())
    gs.write_csv(tmp_path / "other.csv", [{"a": 1}])                  # not a study table: not read
    t = gs.read_tables(tmp_path)
    assert sorted(t) == ["probes", "spike"]
    assert t["probes"][0]["layer"] == "l0" and t["probes"][0]["qat_rel_err_fp32"] == "nan"
    gs.write_csv(tmp_path / "cols.csv", [{"a": 1, "b": 2}, {"c": 3}], columns=["c", "a"])
    assert (tmp_path / "cols.csv").read_text() == "c,a\n,1\n3,\n"
    gs.write_csv(tmp_path / "union.csv", [{"a": 1}, {"b": math.nan}])
    assert (tmp_path / "union.csv").read_text() == "a,b\n1,\n,nan\n"
    text = gs.guide_table(tmp_path)
    assert text.startswith("|  | claim | paper | measured | verdict | rule |\n|---|---|---|---|---|---|\n| (a) | ")
    assert "| (e) | after an amax spike" in text and "| reproduced |" in text
    assert ("Per recipe x stack at step 2 (relative errors against float64, averaged over the layers; model "
            "level: the whole backward, against torch float32 and QAT):") in text
    assert "\n| te-current@h100 | 0.06 | 0.12 | 0.24 | -0.008 | 0.0008 | 0.16 | 0.016 |\n" in text
    (tmp_path / "none").mkdir()          # a study folder holding no tables (a missing one is an error)
    assert "Per recipe" not in gs.guide_table(tmp_path / "none")
    lines = gs.readme_block(tmp_path).splitlines()
    assert lines[0] == "- (a) not at this scale: SR makes NVFP4's weight gradient unbiased (not run)"
    assert lines[4] == "- (e) reproduced: delayed scaling is off for its history after a spike (4 steps)"
    assert len(lines) == 7


def test_a_pipe_in_a_cell_is_escaped_in_the_markdown_table(tmp_path):
    text = gs.guide_table(tmp_path)          # a study folder holding no tables
    row_b = next(line for line in text.splitlines() if line.startswith("| (b) "))
    assert "\\|Q_fprop" not in row_b        # "not run" measured; the rule has no pipe
    assert gs._md_table([["x", "y"], ["a|b", 1]]) == "| x | y |\n|---|---|\n| a\\|b | 1 |"


# ----------------------------------------------------------------------------- figures
def test_figure_bias_plots_each_curve_and_its_one_over_sqrt_n_reference():
    t = _eden(0.02, 0.01, [0.2, 0.1, 0.05, 0.025], sr_curve=(0.4, 0.3, 0.2, 0.1))
    t["bias"] += [{"case": "plain", "recipe": "te-nvfp4", "level": "wgrad", "n": n, "rel_err_mean": 1 / n}
                  for n in (4, 1)]
    fig = gs.figure_bias(t)
    left, right = fig.axes
    data = [(list(ln.get_xdata()), list(ln.get_ydata()), ln.get_linestyle()) for ln in left.get_lines()]
    assert data[0] == ([1, 4, 16, 64], [0.2, 0.1, 0.05, 0.025], "-")
    assert data[1][0] == [1, 4, 16, 64] and data[1][1] == pytest.approx([0.2, 0.1, 0.05, 0.025]) and data[1][2] == ":"
    assert data[2][1] == [0.4, 0.3, 0.2, 0.1] and data[3][1] == pytest.approx([0.4, 0.2, 0.1, 0.05])
    assert [ln.get_label() for ln in left.get_lines()][::2] == ["ms-eden-rht (eden)", "sr-rht (eden)"]
    (w, ref) = right.get_lines()
    assert list(w.get_xdata()) == [1, 4] and list(w.get_ydata()) == [1.0, 0.25] and list(ref.get_ydata()) == [1.0, 0.5]
    assert all(ax.get_xscale() == ax.get_yscale() == "log" for ax in fig.axes)
    assert left.get_title().startswith("quantized grad_output") and right.get_title().startswith("wgrad GEMM")


def test_figure_ksweep_plots_wgrad_against_tokens_and_fprop_dgrad_against_width():
    t = _ksweep([1e-3, 0.0, 4e-3], [1e-4, 2e-4, 4e-4])
    fig = gs.figure_ksweep(t)
    (ax,) = fig.axes
    lines = ax.get_lines()
    # per stack in the order the stacks first appear in the table, each sorted by K
    assert [ln.get_label() for ln in lines] == ["h100-fast: rel. error", "h100-fast: largest entry error",
                                                "h100: rel. error", "h100: largest entry error"]
    assert list(lines[0].get_xdata()) == [256, 1024, 4096]
    assert list(lines[0].get_ydata()) == [1e-3, 1e-12, 4e-3]          # a zero error drawn at 1e-12 on the log axis
    assert list(lines[1].get_ydata()) == [2e-3, 1e-12, 8e-3]
    assert list(lines[2].get_ydata()) == [1e-4, 2e-4, 4e-4] and lines[3].get_linestyle() == "--"
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert tuple(fig.get_size_inches()) == (7, 4.2)             # one panel: narrower than two
    t["widths"] = [{"stack": "h100", "gemm": g, "K": k, "accum_err": e} for g in ("dgrad", "fprop")
                   for k, e in ((512, 2e-3), (256, 0.0))]
    fig = gs.figure_ksweep(t)
    assert len(fig.axes) == 2 and tuple(fig.get_size_inches()) == (12, 4.2)
    wl = fig.axes[1].get_lines()
    assert [ln.get_label() for ln in wl] == ["h100: fprop", "h100: dgrad"]
    assert list(wl[0].get_xdata()) == [256, 512] and list(wl[0].get_ydata()) == [1e-12, 2e-3]   # 0 drawn at 1e-12
    assert fig.axes[1].get_xlabel() == "K (layer width), fprop and dgrad"


def test_figure_spike_and_forks_plot_every_recipe_and_mark_the_spike():
    fig = gs.figure_spike({"spike": _spike()})
    err, frac = fig.axes
    # recipes in the order they first appear (the rows are given last step first), each sorted by step
    assert [ln.get_label() for ln in err.get_lines()[:2]] == ["te-current", "te-delayed"]
    d_err = err.get_lines()[1]
    assert list(d_err.get_xdata()) == list(range(10)) and d_err.get_ydata()[2] == 0.9
    assert [ln.get_label() for ln in frac.get_lines()[2:4]] == ["te-delayed saturated", "te-delayed underflow"]
    assert list(frac.get_lines()[3].get_ydata())[3:7] == [0.006] * 4
    # one red vertical line per axis, at the spike's step
    for ax in (err, frac):
        marks = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [2, 2]]
        assert len(marks) == 1
    assert err.get_yscale() == "log"
    forks = [{"label": lab, "step": s, "loss_minus_fp32": s * k, "weight_dist": s / k}
             for lab, k in (("a", 1.0), ("b", 2.0)) for s in (2, 0, 1)]
    fig = gs.figure_forks({"forks": forks})
    loss, dist = fig.axes
    assert [ln.get_label() for ln in loss.get_lines()] == ["a", "b"]
    assert list(loss.get_lines()[1].get_ydata()) == [0.0, 2.0, 4.0]
    assert list(dist.get_lines()[1].get_ydata()) == [0.0, 0.5, 1.0]
    assert all(ln.get_linewidth() > 0 for ax in (loss, dist) for ln in ax.get_lines())      # drawn, not invisible


# ----------------------------------------------------------------------------- the report
def test_write_report_writes_every_table_figure_and_section(tmp_path):
    tables = {"probes": _probes(), "spike": _spike(), "draws": _draws(([0.08], [0.1]), ([0.18], [0.2]))["draws"],
              "forks": [{"label": "a", "step": s, "loss_minus_fp32": s, "weight_dist": s} for s in range(3)]}
    tables["probes"][0]["rel_err_mean"] = 0.005
    out = tmp_path / "r"
    paths = gs.write_report(tables, out, {"torch": "2.x <cpu> & co", "seed": 3})
    names = [p.relative_to(out).as_posix() for p in paths]
    assert names == ["report.md", "report.html", "figures/spike.png", "figures/forks.png"]
    assert sorted(p.name for p in out.iterdir()) == ["draws.csv", "figures", "findings.csv", "forks.csv",
                                                     "probes.csv", "provenance.csv", "report.html", "report.md",
                                                     "spike.csv"]
    assert gs.read_csv(out / "provenance.csv") == [{"item": "torch", "value": "2.x <cpu> & co"},
                                                  {"item": "seed", "value": "3"}]
    found = gs.read_csv(out / "findings.csv")
    assert [(r["finding"], r["verdict"]) for r in found] == [
        ("a", "not at this scale"), ("b", "not at this scale"), ("c", "reproduced"), ("d", "not at this scale"),
        ("e", "reproduced"), ("f", "not at this scale"), ("g", "not at this scale")]
    md = (out / "report.md").read_text()
    titles = re.findall(r"^## (.*)$", md, re.M)
    assert titles == ["How to read it", "Findings", "Per recipe x stack at the last checkpoint", "Definitions",
                      "Thresholds of the verdict rules", "Per-layer probes (first 60 rows; all in probes.csv)",
                      "Provenance", "Around an amax spike (e)", "Forks from a shared checkpoint"]
    assert md.startswith("# fp8emu grad-study report\n\n## How to read it\n\n* Every number compares runs")
    assert "| te-current@h100 | 0.06 | 0.12 | 0.24 | -0.008 | 0.0008 | 0.16 | 0.016 |" in md
    assert "| e_tolerance | 1 |" in md and "| torch | 2.x <cpu> & co |" in md
    # the first probe row: rel_err 0.01, mean 0.005 of N = 4, rel_err / sqrt(4) = 0.005, QAT vs fp32 "nan" as read
    assert ("| 0 | te-current@h100 | l0 | fprop | 0.01 | 1 | -0.001 | 0.005 (N=4) | 0.005 | 0.005 | 0.0001 "
            "| 0.02 | 0.002 | nan |") in md
    assert "| 2 | te-current@h100 | l1 | wgrad |" in md and " (N=4) |" in md
    assert "![Around an amax spike (e)](figures/spike.png)" in md
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fp8emu grad-study report")
    assert "<td>2.x &lt;cpu&gt; &amp; co</td>" in page and "<cpu>" not in page
    assert "<h2>Definitions</h2><table><thead><tr><th>name</th><th>meaning</th></tr></thead>" in page
    for name in ("spike", "forks"):
        png = (out / "figures" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        # the whole 12 x 4.2 inch figure at 90 dpi, not cropped to what is drawn (IHDR: width, height)
        assert struct.unpack(">II", png[16:24]) == (1080, 378)
        assert f"src=\"data:image/png;base64,{base64.b64encode(png).decode('ascii')}\">" in page
    assert page.endswith("</body></html>")


def test_the_probe_table_shows_sixty_rows():
    rows = [dict(_probes()[0], state=i) for i in range(70)]
    t = gs._probe_table(rows)
    assert len(t) == 61 and t[-1][0] == 59
    assert len(gs._probe_table(rows, limit=5)) == 6


# ----------------------------------------------------------------------------- seed 64's holes
def test_mean_curve_takes_any_iterable_of_draw_counts():
    # draws 2 and 0.5 of a reference of ones: the mean of one is 2 (error 1), of both 1.25 (error 0.25);
    # an array of counts or a generator of them is as good as a list
    ref = np.ones(3)
    draws = [2 * ref, 0.5 * ref]
    for ns in ([1, 2], np.array([1, 2]), (n for n in (1, 2)), range(1, 3)):
        assert gm.mean_curve(draws, ref, ns) == pytest.approx([1.0, 0.25], rel=1e-15), ns


def test_fit_floor_of_no_points_is_refused_and_a_fit_may_have_no_floor():
    with pytest.raises(ValueError, match=r"fit_floor: ns and errs must be 1-D of one length >= 1"):
        gm.fit_floor([], [])
    # err^2 = 1, 1/4, 1/16 at n = 1, 2, 4 falls faster than 1/n: the free fit's floor b^2 is negative
    # (-5/16). Of the one-part fits, v alone (v = sum(e2/n) / sum(1/n^2) = (73/64) / (84/64) = 73/84,
    # residual 1.0664 - (73/64)^2 / (84/64) = 0.075) beats b alone (b^2 = the mean 7/16, residual 0.49).
    b, v = gm.fit_floor([1, 2, 4], [1.0, 0.5, 0.25])
    assert b == 0.0 and v == pytest.approx(73 / 84, rel=1e-12)


@pytest.mark.parametrize("factor", [0, 0.0, -0.5])
def test_spike_summary_refuses_a_factor_that_is_not_above_zero(factor):
    with pytest.raises(ValueError, match=r"spike_summary: factor must be a finite number > 0"):
        gs.spike_summary(_spike(), factor=factor)


def test_finding_c_reads_the_nan_of_its_own_draws_only():
    t = _draws(([0.08, 0.10], [0.10, 0.10]), ([0.18, 0.18], [0.2, 0.2]))
    # a NaN in the RHT recipe's dgrad draw and in another recipe's wgrad draw: neither is a draw of the rule
    for r in t["draws"]:
        if r["gemm"] == "dgrad" or r["recipe"] == "te-mxfp8":
            r["rel_err"] = math.nan
    c = _by(gs.findings(t))["c"]
    assert c["verdict"] == "reproduced" and c["value"] == pytest.approx(0.9) and "NaN" not in c["measured"]
    # a NaN in one of its own wgrad draws: no verdict
    t["draws"][0]["rel_err"] = math.nan
    c = _by(gs.findings(t))["c"]
    assert c["verdict"] == "not at this scale" and c["measured"].endswith("; 1 NaN measurement(s): no verdict")


def test_the_figures_legend_sizes_marker_sizes_and_axis_labels():
    t = _eden(0.02, 0.01, [0.2, 0.1, 0.05, 0.025])
    t["bias"] += [{"case": "plain", "recipe": "te-nvfp4", "level": "wgrad", "n": n, "rel_err_mean": 1 / n}
                  for n in (1, 4)]
    bias = gs.figure_bias(t)
    ksweep = gs.figure_ksweep(_ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 4e-4]))
    spike = gs.figure_spike({"spike": _spike()})
    forks = gs.figure_forks({"forks": [{"label": "a", "step": s, "loss_minus_fp32": s, "weight_dist": s}
                                       for s in range(3)]})
    for fig, size in ((bias, 7), (ksweep, 7), (spike, 7), (forks, 6)):
        for ax in fig.axes:
            assert {t.get_fontsize() for t in ax.get_legend().get_texts()} == {size}
    # every line drawn with markers (not the references, spike marks or fork lines) has size 3
    marked = [ln for fig in (bias, ksweep, spike) for ax in fig.axes for ln in ax.get_lines()
              if ln.get_marker() not in ("None", None, "")]
    assert len(marked) == 3 + 4 + 2 * 3 and {ln.get_markersize() for ln in marked} == {3}
    assert [ln.get_marker() for ln in spike.axes[1].get_lines()[:2]] == ["o", "x"]
    assert [ax.get_ylabel() for ax in spike.axes] == ["fprop relative error", "fraction of the input"]
    assert [ax.get_ylabel() for ax in forks.axes] == ["eval loss - fp32 fork's (nats/byte)",
                                                      "|theta - theta_fp32| / |theta_fp32 - theta_0|"]
    assert [ax.get_xlabel() for ax in forks.axes] == ["steps after the fork"] * 2


# ----------------------------------------------------------------------------- seed 67's holes
def test_loglog_slope_refuses_unequal_or_two_dimensional_points():
    # unequal lengths (NumPy's own broadcast error named neither argument) and a 2-D pair of one shape
    # (which the mask would silently flatten into a fit)
    for xs, ys in (([1, 2, 3], [1, 2]), ([[1, 2], [4, 8]], [[1, 0.5], [0.25, 0.125]])):
        with pytest.raises(ValueError, match="loglog_slope: xs and ys must be 1-D of one length"):
            gm.loglog_slope(xs, ys)


def test_finding_a_slope_range_includes_both_ends(monkeypatch):
    # the rule: SR's operand slope in [-0.65, -0.35] (closed) and a floor below 0.8 x no-SR's wgrad error
    wg = [math.sqrt(0.01 + 0.04 / n) for n in (1, 4, 16, 64)]          # floor 0.1 < 0.8 x 0.2
    t = _bias([0.2 / math.sqrt(n) for n in (1, 4, 16, 64)], [0.15] * 4, wg, [0.2] * 4)
    for slope, verdict in ((-0.65, "reproduced"), (-0.35, "reproduced"), (-0.66, "not at this scale"),
                           (-0.34, "not at this scale")):
        monkeypatch.setattr(gs, "loglog_slope", lambda xs, ys, s=slope: s)
        assert _by(gs.findings(t))["a"]["verdict"] == verdict, slope


def test_the_figures_sizes_and_each_laid_out_tightly():
    import matplotlib as mpl
    t = _eden(0.02, 0.01, [0.2, 0.1, 0.05, 0.025])
    t["bias"] += [{"case": "plain", "recipe": "te-nvfp4", "level": "wgrad", "n": n, "rel_err_mean": 1 / n}
                  for n in (1, 4)]         # a wgrad curve, so that both panels have a legend
    bias = gs.figure_bias(t)
    ksweep = gs.figure_ksweep(_ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 4e-4]))
    spike = gs.figure_spike({"spike": _spike()})
    assert tuple(bias.get_size_inches()) == (12, 4.2)
    for fig in (bias, ksweep, spike):
        # tight_layout moves the margins off matplotlib's defaults (0.125 left, 0.9 right)
        p = fig.subplotpars
        assert p.left != mpl.rcParams["figure.subplot.left"] and p.right != mpl.rcParams["figure.subplot.right"]


# ----------------------------------------------------------------------------- seed 69's hole
def test_the_bias_and_ksweep_figures_label_both_axes_of_every_panel():
    # the spike and forks figures' labels are checked above; these two figures' were not (a dropped y label
    # left a panel of error curves with no unit)
    t = _eden(0.02, 0.01, [0.2, 0.1, 0.05, 0.025])
    t["bias"] += [{"case": "plain", "recipe": "te-nvfp4", "level": "wgrad", "n": n, "rel_err_mean": 1 / n}
                  for n in (1, 4)]
    bias = gs.figure_bias(t)
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in bias.axes] == \
        [("draws N", "relative error of the mean vs float64")] * 2
    assert [ax.title.get_fontsize() for ax in bias.axes] == [9, 9]
    t = _ksweep([1e-3, 2e-3, 4e-3], [1e-4, 2e-4, 4e-4])
    t["widths"] = [{"stack": "h100", "gemm": g, "K": k, "accum_err": 1e-3} for g in ("fprop", "dgrad") for k in (256, 512)]
    ksweep = gs.figure_ksweep(t)
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in ksweep.axes] == [
        ("K (tokens per batch), wgrad", "accumulation error (stack vs exact accumulation)"),
        ("K (layer width), fprop and dgrad", "accumulation error (stack vs exact accumulation)")]
