"""The LM study's joint analysis over pairs (``fp8emu.lab.lm_study.joint_analysis``), its detection of
identical results, and the t / F distributions it uses.

Expectations are derived here independently: exact rationals for the analysis of variance, a full
enumeration of the within-seed shuffles for the permutation test, closed forms (df 1 and 2) and the
published 95 % t table for the distributions, and plain string comparison of the committed CSV.
"""
import csv
import itertools
import math
from fractions import Fraction as F
from pathlib import Path

import pytest

from fp8emu.lab.lm_study import T975, contrast, f_sf, identical_results, joint_analysis, t_quantile

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "lm-study"


def _csv(name):
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(f))


def _rows(table):
    return [{"run_id": f"{r}@{st}-s{k}", "recipe": r, "stack": st, "seed": k, "final_val_loss": v,
             "final_train_loss": 3.0, "diverged": 0} for (r, st, k), v in table.items()]


# ----------------------------------------------------------------------------- distributions
@pytest.mark.parametrize("df", range(1, 31))
def test_t_quantile_is_the_published_table(df):
    assert t_quantile(0.975, df) == pytest.approx(T975[df - 1], abs=2e-9)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.999])
def test_t_quantile_closed_forms(p):
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-10)      # Cauchy
    a = 2 * p - 1                                    # df 2: CDF 1/2 + t / (2 sqrt(2 + t^2))
    assert t_quantile(p, 2) == pytest.approx(a * math.sqrt(2 / (1 - a * a)), rel=1e-10)


@pytest.mark.parametrize("x", [0.1, 0.9, 1.0, 2.5, 7.0])
@pytest.mark.parametrize("d", [1, 5, 43, 86])
def test_f_tail_closed_forms(x, d):
    assert f_sf(x, 2, d) == pytest.approx((1 + 2 * x / d) ** (-d / 2), rel=1e-10)
    assert f_sf(x, d, 2) == pytest.approx(1 - (d * x / (d * x + 2)) ** (d / 2), rel=1e-9, abs=1e-14)


def test_t_quantile_refuses_bad_arguments():
    with pytest.raises(ValueError, match="t_quantile: p must be in"):
        t_quantile(0.3, 4)
    with pytest.raises(ValueError, match="df >= 1"):
        t_quantile(0.975, 0)


# ----------------------------------------------------------------------------- identical results
def test_committed_identical_results_are_the_csv_strings():
    """Pairs whose runs.csv and curves.csv loss strings agree at every seed (plain string equality)."""
    curves = {}
    for c in _csv("curves.csv"):
        curves.setdefault(c["run_id"], []).append((int(c["step"]), c["val_loss"]))
    sig = {}
    for r in _csv("runs.csv"):
        if r["stack"]:
            sig.setdefault(f"{r['recipe']}@{r['stack']}", []).append(
                (r["seed"], r["final_val_loss"], r["final_train_loss"], tuple(sorted(curves[r["run_id"]]))))
    by = {}
    for lab, v in sig.items():
        by.setdefault(tuple(sorted(v)), []).append(lab)
    want = sorted(sorted(g) for g in by.values() if len(g) > 1)
    got = identical_results(_csv_floats("runs.csv"), _csv_floats("curves.csv"))
    assert sorted(sorted(g) for g in got) == want
    assert want == [[f"te-current@{s}", f"torchao-tensorwise@{s}"] for s in ("b200", "exact", "h100", "h100-fast")]


def _csv_floats(name):
    out = []
    for r in _csv(name):
        out.append({k: (float(v) if k in ("final_val_loss", "final_train_loss", "val_loss") else v)
                    for k, v in r.items()})
    return out


def test_one_differing_seed_or_curve_point_keeps_pairs_apart():
    t = {("a", "x", 0): 2.5, ("b", "x", 0): 2.5, ("a", "x", 1): 2.4, ("b", "x", 1): 2.4}
    assert identical_results(_rows(t)) == [["a@x", "b@x"]]
    t[("b", "x", 1)] = 2.4000000000000004        # one ulp
    assert identical_results(_rows(t)) == []
    curves = [{"run_id": "a@x-s0", "step": 20, "val_loss": 3.0}, {"run_id": "b@x-s0", "step": 20, "val_loss": 3.1}]
    t[("b", "x", 1)] = 2.4
    assert identical_results(_rows(t), curves) == []


# ----------------------------------------------------------------------------- joint analysis
# three results (c and d identical: one result) and bf16, three seeds
TABLE = {("bf16", "", 0): 2.0, ("bf16", "", 1): 2.5, ("bf16", "", 2): 2.25,
         ("a", "x", 0): 2.25, ("a", "x", 1): 2.5, ("a", "x", 2): 2.75,
         ("b", "x", 0): 3.0, ("b", "x", 1): 2.75, ("b", "x", 2): 2.5,
         ("c", "y", 0): 2.5, ("c", "y", 1): 3.25, ("c", "y", 2): 2.5,
         ("d", "y", 0): 2.5, ("d", "y", 1): 3.25, ("d", "y", 2): 2.5}


def _exact_anova(L, B):
    P, S = len(L), len(L[0])
    L = [[F(v) for v in row] for row in L]
    col = [sum(L[p][s] for p in range(P)) / P for s in range(S)]
    shift = [col[s] - F(B[s]) for s in range(S)]
    dev = [sum(L[p][s] - col[s] for s in range(S)) / S for p in range(P)]
    ss_pairs = S * sum(d * d for d in dev)
    ss_tot = sum((L[p][s] - col[s]) ** 2 for p in range(P) for s in range(S))
    df_e = (P - 1) * (S - 1)
    mse = (ss_tot - ss_pairs) / df_e
    return shift, dev, (ss_pairs / (P - 1)) / mse, mse, df_e


def test_joint_analysis_is_the_exact_two_way_analysis():
    j = joint_analysis(_rows(TABLE), n_perm=99)
    assert j["labels"] == ["a@x", "b@x", "c@y"] and j["identical"] == [["c@y", "d@y"]]
    L = [[TABLE[(r, st, k)] for k in range(3)] for r, st in (("a", "x"), ("b", "x"), ("c", "y"))]
    shift, dev, Fv, mse, df_e = _exact_anova(L, [TABLE[("bf16", "", k)] for k in range(3)])
    assert j["shift_per_seed"] == pytest.approx([float(v) for v in shift], abs=1e-15)
    assert [j["dev"][lab] for lab in j["labels"]] == pytest.approx([float(d) for d in dev], abs=1e-15)
    assert j["F"] == pytest.approx(float(Fv), rel=1e-12) and j["df"] == (2, df_e)
    assert j["residual_sd"] == pytest.approx(math.sqrt(mse), rel=1e-12)
    assert j["pair_diff_half"] == pytest.approx(2.7764451052 * math.sqrt(2 * float(mse) / 3), rel=1e-9)
    mean = sum(shift) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in shift) / 2)
    assert j["shift"]["mean"] == pytest.approx(float(mean), abs=1e-15)
    assert j["shift"]["ci_high"] == pytest.approx(float(mean) + 4.3026527297 * sd / math.sqrt(3), rel=1e-9)


def test_permutation_p_values_match_full_enumeration():
    """Every within-seed shuffle of a 3 x 3 table (6^3 = 216, equally likely): exact p, against 20000 draws."""
    L = [[2.25, 2.5, 2.75], [3.0, 2.75, 2.5], [2.5, 3.25, 2.625]]
    t = {("bf16", "", k): 2.0 for k in range(3)}
    t.update({(r, "x", k): L[i][k] for i, r in enumerate("abc") for k in range(3)})
    cols = [[F(L[p][s]) for p in range(3)] for s in range(3)]
    means = [sum(c) / 3 for c in cols]

    def stats(perm):
        dev = [sum(cols[s][perm[s][p]] - means[s] for s in range(3)) / 3 for p in range(3)]
        return max(abs(d) for d in dev), sum(d * d for d in dev)
    obs = stats([(0, 1, 2)] * 3)
    every = [stats(p) for p in itertools.product(itertools.permutations(range(3)), repeat=3)]
    p_max = F(sum(m >= obs[0] for m, _ in every), len(every))
    p_ss = F(sum(v >= obs[1] for _, v in every), len(every))
    j = joint_analysis(_rows(t), n_perm=20000, seed=1)
    assert j["max_dev"] == pytest.approx(float(obs[0]), abs=1e-15)
    assert abs(j["p_max"] - float(p_max)) < 0.01 and abs(j["p_perm_F"] - float(p_ss)) < 0.01
    crit = sorted(m for m, _ in every)[math.ceil(0.95 * len(every)) - 1]
    assert j["max_dev_crit"] <= float(max(m for m, _ in every)) + 1e-15 and j["max_dev_crit"] >= float(crit) - 1e-15


def test_joint_analysis_same_seed_same_bits():
    a, b = joint_analysis(_rows(TABLE), n_perm=199, seed=3), joint_analysis(_rows(TABLE), n_perm=199, seed=3)
    assert a == b


@pytest.mark.parametrize("change, words", [
    (lambda rows: rows, "n_perm must be at least 19"),
    (lambda rows: [r for r in rows if r["recipe"] != "bf16"], "no bf16 baseline"),
    (lambda rows: [{**r, "diverged": int(r["run_id"] == "a@x-s1")} for r in rows], "diverged runs"),
    (lambda rows: [r for r in rows if r["recipe"] in ("bf16", "a")], "needs two emulated results"),
])
def test_joint_analysis_refuses_bad_input(change, words):
    with pytest.raises(ValueError, match="joint_analysis") as e:
        joint_analysis(change(_rows(TABLE)), n_perm=5 if "n_perm" in words else 99)
    assert words in str(e.value)


def test_contrast_counts_identical_results_once():
    t = dict(TABLE)
    t.update({(r, "z", k): v - 0.5 for (r, st, k), v in TABLE.items() if st == "y"})   # c@z = d@z as well
    same = identical_results(_rows(t))
    c = contrast(_rows(t), ("*", "y"), ("*", "z"), same)
    assert c["keys"] == ["c"] and c["merged"] == {"c": ["d"]} and c["mean"] == pytest.approx(0.5, abs=1e-15)
    # without the groups both recipes are keys (the same difference counted twice)
    assert contrast(_rows(t), ("*", "y"), ("*", "z"))["keys"] == ["c", "d"]
    # a key whose one side differs is a distinct result and stays
    t[("d", "z", 0)] = 1.5
    c = contrast(_rows(t), ("*", "y"), ("*", "z"), identical_results(_rows(t)))
    assert c["keys"] == ["c", "d"] and c["merged"] == {}


# ----------------------------------------------------------------------------- the committed study
def test_committed_per_seed_mean_gap_to_bf16():
    """Over all 48 pairs, the mean gap to bf16 is +0.055, +0.015 and -0.028 at seeds 0-2."""
    runs = _csv("runs.csv")
    bf = {r["seed"]: F(r["final_val_loss"]) for r in runs if r["recipe"] == "bf16"}
    per = []
    for s in ("0", "1", "2"):
        g = [F(r["final_val_loss"]) - bf[s] for r in runs if r["stack"] and r["seed"] == s]
        assert len(g) == 48
        per.append(sum(g) / len(g))
    assert [round(float(v), 3) for v in per] == [0.055, 0.015, -0.028]
    # the joint analysis counts the four twice-run results once: 44 results
    j = joint_analysis(_csv_floats("runs.csv"), _csv_floats("curves.csv"))
    twins = {f"torchao-tensorwise@{s}" for s in ("h100", "h100-fast", "b200", "exact")}
    keep = [r for r in runs if r["stack"] and f"{r['recipe']}@{r['stack']}" not in twins]
    assert len(j["labels"]) == len(keep) // 3 == 44
    for k, s in enumerate(("0", "1", "2")):
        g = [F(r["final_val_loss"]) - bf[s] for r in keep if r["seed"] == s]
        assert j["shift_per_seed"][k] == pytest.approx(float(sum(g) / len(g)), abs=1e-15)


def test_guide_tables_says_why_there_is_no_joint_analysis(tmp_path):
    """A study of one pair has no joint analysis: the tables say so instead of failing or inventing one."""
    from fp8emu.lab.lm_study import guide_tables
    for name in ("runs", "gaps", "curves"):
        rows = _csv(f"{name}.csv")
        keep = [r for r in rows if r["recipe"] in ("bf16", "te-delayed") and r["stack"] in ("", "h100")]
        with open(tmp_path / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(keep)
    text = guide_tables(tmp_path)
    assert "No joint analysis: joint_analysis: needs two emulated results at two seeds shared with bf16" in text
    assert "No two pairs give the same losses" in text and "| te-delayed | h100 |" in text


def test_a_result_missing_a_seed_is_left_out_and_named():
    t = dict(TABLE)
    t[("e", "x", 0)] = 2.5                       # run at one seed of three
    j = joint_analysis(_rows(t), n_perm=99)
    assert j["seeds"] == [0, 1, 2] and j["incomplete"] == ["e@x"] and j["labels"] == ["a@x", "b@x", "c@y"]
    assert j["F"] == joint_analysis(_rows(TABLE), n_perm=99)["F"]
