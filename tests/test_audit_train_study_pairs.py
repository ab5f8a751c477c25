"""``train-study --pairs`` reads its names as ``--recipes`` and ``--stacks`` do: spaces around a name are no part of it.

``--recipes " te-delayed"`` was taken while ``--pairs "te-delayed @ h100"`` was "unknown recipe 'te-delayed '"
beside a list of recipes that names te-delayed.
"""

import pytest

pytest.importorskip("torch")

from fp8emu.cli import main  # noqa: E402


@pytest.mark.parametrize("pairs", ["te-delayed @ h100", " te-delayed@h100 ", "te-delayed@ h100,te-delayed @h100"])
def test_spaces_around_a_pairs_names_are_stripped(pairs, capsys):
    assert main(["train-study", "--quick", "--pairs", pairs, "--baselines", "none", "--seeds", "1", "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == ["te-delayed@h100-s0  (diagnostics)", "1 runs"]


def test_an_unknown_name_in_a_pair_is_still_one_line(capsys):
    assert main(["train-study", "--quick", "--pairs", "te-delayed @ mars", "--list"]) == 2
    assert "unknown stack 'mars'" in capsys.readouterr().err
