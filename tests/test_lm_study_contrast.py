"""``fp8emu.lab.lm_study.contrast``: the seed-paired pooled differences the LM-study guide reports.

Expectations are worked out here by hand in exact rationals; the 95 % two-sided Student-t
quantiles are the published table values (df 1: 12.7062..., df 2: 4.3026...); the module keeps
them to three decimals, so the interval ends are compared to 1e-4 relative.
"""
import math
from fractions import Fraction as F

import pytest

from fp8emu.lab.lm_study import contrast

T975 = {1: 12.706204736174707, 2: 4.302652729749464}


def _rows(table, diverged=()):
    return [{"recipe": r, "stack": st, "seed": k, "final_val_loss": v,
             "diverged": int((r, st, k) in diverged)} for (r, st, k), v in table.items()]


# two recipes on two stacks plus the bf16 baseline (stack "" as in runs.csv), three seeds
TABLE = {
    ("x", "fast", 0): 3.0, ("x", "slow", 0): 2.5, ("y", "fast", 0): 2.25, ("y", "slow", 0): 2.0,
    ("x", "fast", 1): 2.0, ("x", "slow", 1): 2.0, ("y", "fast", 1): 2.5, ("y", "slow", 1): 2.0,
    ("x", "fast", 2): 2.75, ("x", "slow", 2): 2.5, ("y", "fast", 2): 2.0, ("y", "slow", 2): 2.25,
    ("bf16", "", 0): 2.0, ("bf16", "", 1): 1.75, ("bf16", "", 2): 2.5,
}


def _t_interval(per_seed):
    n = len(per_seed)
    mean = sum(F(v) for v in per_seed) / n
    var = sum((F(v) - mean) ** 2 for v in per_seed) / (n - 1)
    half = T975[n - 1] * math.sqrt(var) / math.sqrt(n)
    return float(mean), math.sqrt(var), float(mean) - half, float(mean) + half


def _check(c, per_seed, keys, seeds):
    mean, sd, lo, hi = _t_interval(per_seed)
    assert c["keys"] == keys and c["seeds"] == seeds and c["n"] == len(seeds)
    assert c["mean"] == pytest.approx(mean, abs=1e-15)
    assert c["sd"] == pytest.approx(sd, rel=1e-12)
    assert c["ci_low"] == pytest.approx(lo, rel=1e-4) and c["ci_high"] == pytest.approx(hi, rel=1e-4)


def test_stack_contrast_averages_recipes_within_a_seed_first():
    # per seed: mean over recipes x, y of (fast - slow)
    per_seed = [(F("0.5") + F("0.25")) / 2, (F(0) + F("0.5")) / 2, (F("0.25") + F("-0.25")) / 2]
    _check(contrast(_rows(TABLE), ("*", "fast"), ("*", "slow")), per_seed, ["x", "y"], [0, 1, 2])


def test_recipe_contrast_pairs_stacks():
    per_seed = [(F("0.75") + F("0.5")) / 2, (F("-0.5") + F(0)) / 2, (F("0.75") + F("0.25")) / 2]
    _check(contrast(_rows(TABLE), ("x", "*"), ("y", "*")), per_seed, ["fast", "slow"], [0, 1, 2])


def test_fixed_baseline_is_subtracted_from_every_key():
    per_seed = [(F(3) + F("2.25")) / 2 - 2, (F(2) + F("2.5")) / 2 - F("1.75"), (F("2.75") + F(2)) / 2 - F("2.5")]
    _check(contrast(_rows(TABLE), ("*", "fast"), ("bf16", None)), per_seed, ["x", "y"], [0, 1, 2])


def test_key_missing_at_a_seed_is_dropped_not_half_counted():
    t = dict(TABLE)
    del t[("y", "slow", 2)]
    per_seed = [F("0.5"), F(0), F("0.25")]          # x only
    _check(contrast(_rows(t), ("*", "fast"), ("*", "slow")), per_seed, ["x"], [0, 1, 2])


def test_diverged_run_makes_the_contrast_nan_not_a_number():
    c = contrast(_rows(TABLE, diverged={("y", "fast", 1)}), ("*", "fast"), ("*", "slow"))
    assert math.isnan(c["mean"]) and math.isnan(c["ci_low"]) and math.isnan(c["ci_high"])


def test_nothing_matches_gives_nan():
    c = contrast(_rows(TABLE), ("*", "nowhere"), ("*", "slow"))
    assert c["keys"] == [] and math.isnan(c["mean"])


@pytest.mark.parametrize("a, b, words", [
    (("*", "*"), ("x", "slow"), "one field open"),
    (("x", "fast"), ("x", "slow"), "one field open"),
    (("*", "fast"), ("x", "*"), "the same one or none"),
    (["*", "fast"], ("*", "slow"), "(recipe, stack) tuple"),
    (("*", 3), ("*", "slow"), "(recipe, stack) tuple"),
])
def test_bad_patterns_are_named(a, b, words):
    with pytest.raises(ValueError, match="contrast") as e:
        contrast(_rows(TABLE), a, b)
    assert words in str(e.value)
