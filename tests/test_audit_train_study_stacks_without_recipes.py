"""``train-study --recipes none --stacks ...`` refuses the stacks it would ignore.

``--recipes none`` runs the baselines only, so ``--stacks`` chose nothing: ``--stacks bogus`` (a stack no
stack list holds) was taken and the study listed and ran its baselines, the option ignored, unchecked.
The command now refuses it in one line before anything is planned or written.
"""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402


@pytest.mark.parametrize("stacks", ["bogus", "h100", "all"])
def test_stacks_with_no_recipes_are_refused(stacks, tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["train-study", "--quick", "--recipes", "none", "--stacks", stacks, "--list",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--stacks '{stacks}'" in err and "--recipes none" in err and "ignored" in err
    assert not out.exists()


def test_no_recipes_without_stacks_lists_the_baselines(capsys):
    assert main(["train-study", "--quick", "--recipes", "none", "--baselines", "fp32", "--list"]) == 0
    assert capsys.readouterr().out.split("\n")[-2] == "2 runs"
