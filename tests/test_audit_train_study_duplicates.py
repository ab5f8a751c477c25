"""A recipe, stack, baseline or seed named twice in a train-study makes its runs once.

``--recipes te-current,te-current`` (or ``--stacks h100,h100``, ``--baselines fp32,fp32``) listed every run
of that name twice ("8 runs" of 6) and planned each twice, where ``--pairs`` with a pair twice already made
it once.  ``plan_runs`` takes each name and seed once, and the command's options are read the same way.
"""

import dataclasses

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.torch.study import runs  # noqa: E402


@pytest.mark.parametrize("opts", [["--recipes", "te-current,te-current", "--stacks", "h100"],
                                  ["--recipes", "te-current", "--stacks", "h100, h100"],
                                  ["--pairs", "te-current@h100,te-current@h100"]])
def test_a_name_given_twice_lists_its_runs_once(opts, capsys):
    assert main(["train-study", "--quick", *opts, "--baselines", "fp32,fp32", "--list"]) == 0
    lines = capsys.readouterr().out.split("\n")
    ids = [ln.split()[0] for ln in lines if ln.strip() and not ln.endswith(" runs")]
    assert ids == ["fp32-s0", "fp32-s1", "te-current@h100-s0", "te-current@h100-s1"]
    assert "4 runs" in lines


def test_plan_runs_takes_each_name_and_seed_once():
    cfg = dataclasses.replace(runs.StudyConfig(**{k: v for k, v in runs.QUICK.items() if k in
                                                  {f.name for f in dataclasses.fields(runs.StudyConfig)}}),
                              recipes=("te-current", "te-current"), stacks=("h100", "h100"), pairs=(),
                              baselines=("bf16", "bf16"), seeds=(0, 1, 0), baseline_seeds=(1, 1))
    got = [s.run_id for s in runs.plan_runs(cfg)]
    assert got == ["bf16-s1", "te-current@h100-s0", "te-current@h100-s1"]
