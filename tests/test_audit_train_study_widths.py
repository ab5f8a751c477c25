"""train-study refuses a model width that a recipe x stack pair cannot emulate, before anything runs.

Every projection of the study's model has ``d_model`` features in or out; with ``--d-model 24`` and
te-delayed@h100 (multiples of 16) ``emulate`` left all of them in high precision (one warning on the run's
stderr, a Dask worker's log with ``--workers``) and the run, named te-delayed@h100 in every table, trained in
float32.  It is one line naming the pair, the multiple and ``--d-model``, as a token count the pair cannot
take already was.
"""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import train_study  # noqa: E402
from fp8emu.torch.study import runs  # noqa: E402

_ARGV = ["train-study", "--quick", "--baselines", "none", "--seeds", "1", "--steps", "2", "--eval-every", "1",
         "--no-report", "--quiet"]


@pytest.mark.parametrize("pair, width, mult", [("te-delayed@h100", 24, 16), ("te-mxfp8@b200", 48, 32),
                                               ("te-nvfp4@b200", 96, 64)])
def test_a_width_no_projection_can_take_is_refused_before_training(pair, width, mult, tmp_path, capsys,
                                                                    monkeypatch):
    def trained(*a, **k):          # before the fix the run trained (in float32, under the recipe's name)
        raise AssertionError("the study ran")
    monkeypatch.setattr(train_study.runs, "execute", trained)
    out = tmp_path / "study"
    argv = [*_ARGV, "--pairs", pair, "--d-model", str(width), "--n-head", "2", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and pair in err[0] and f"multiples of {mult}" in err[0] and "--d-model" in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("pair, width", [("te-delayed@h100", 32), ("te-mxfp8@b200", 64), ("torchao-rowwise@cpu", 24)])
def test_a_width_the_pair_takes_is_planned(pair, width, capsys):
    assert main([*_ARGV[:-2], "--pairs", pair, "--d-model", str(width), "--n-head", "2", "--list"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "1 runs"


def test_plan_runs_refuses_it_too():
    cfg = runs.StudyConfig(**{**{k: v for k, v in runs.QUICK.items() if k in ("train", "seeds", "diagnostics")},
                              "model": runs.QUICK["model"].__class__(n_layer=1, d_model=24, n_head=2, seq_len=32,
                                                                     batch=4),
                              "recipes": ("te-current",), "stacks": ("h100",), "baselines": ()})
    with pytest.raises(ValueError, match="te-current@h100 emulates layers whose in and out features are multiples "
                                         "of 16"):
        runs.plan_runs(cfg)
