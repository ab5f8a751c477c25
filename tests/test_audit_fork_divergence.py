"""A fork study whose runs all diverge gets its report, as a study from scratch does.

The trunk trained to the fork step diverged with every run (``--lr 1e30``), so every validation loss was NaN;
the curves figure set its y limits from the smallest loss, and matplotlib's "Axis limits cannot be NaN or
Inf" ended the command after every run had trained, with no report.
"""

import math

import pytest

pytest.importorskip("torch")

from fp8emu.cli import main  # noqa: E402
from fp8emu.lab import lm_study  # noqa: E402


def _run(recipe, stack, losses):
    return {"spec": {"recipe": recipe, "stack": stack, "seed": 0}, "eval_steps": list(range(len(losses))),
            "val_loss": losses}


@pytest.mark.parametrize("losses", [[math.nan] * 3, [math.nan, math.inf, 4.0]])
def test_the_curves_figure_takes_losses_that_are_not_finite(losses):
    fig = lm_study.figure_curves([_run("bf16", None, losses), _run("te-current", "h100", [math.nan] * 3)])
    lo, hi = fig.axes[0].get_ylim()
    assert math.isfinite(lo) and math.isfinite(hi)
    if 4.0 in losses:
        assert (lo, hi) == (4.0 - 0.05, 4.0 + 1.5)


def test_a_diverged_fork_study_writes_its_report(tmp_path, capsys):
    out = tmp_path / "fk"
    argv = ["train-study", "--quick", "--fork-at", "3", "--steps", "5", "--eval-every", "1", "--baselines", "bf16",
            "--pairs", "te-current@h100", "--seeds", "1", "--lr", "1e30", "--no-inference", "--out", str(out)]
    assert main(argv) == 0
    assert "(1 of 1 seeds diverged)" in capsys.readouterr().out
    assert (out / "report.md").exists() and (out / "fork_gaps.csv").exists()
