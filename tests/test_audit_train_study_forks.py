"""Hostile input to ``fp8emu train-study --forks / --fork-at`` (tests/AUDIT.md, "Fresh audit of the CPU order,
probes, compile and filters").  Nothing here trains: every case is refused before a run starts."""

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.torch.study import runs  # noqa: E402

TINY = ["--n-layer", "1", "--d-model", "16", "--n-head", "1", "--seeds", "1", "--steps", "3", "--fork-at", "2",
        "--workers", "1"]


def test_the_forks_help_gives_the_presets_fork_steps(capsys):
    # it said "step 104 of 120": the committed fork study forks at 112 (runs.FORKS, docs/data/lm-forks)
    with pytest.raises(SystemExit):
        main(["train-study", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    committed = json.loads((Path(__file__).resolve().parents[1] / "docs/data/lm-forks/study.json").read_text())
    fork_at = re.search(r'"fork_at": (\d+)', json.dumps(committed)).group(1)
    full, quick = runs.FORKS["train"], runs.QUICK_FORKS["train"]
    assert int(fork_at) == full.fork_at
    assert f"the committed fork study, step {fork_at} of {full.steps}; with --quick, step {quick.fork_at} of " \
           f"{quick.steps}" in text


@pytest.mark.parametrize("baselines", ["fp32", "none"])
def test_forks_without_the_bf16_baseline_are_refused_before_training(tmp_path, capsys, baselines):
    # every run trained, then the report failed: "paired_gaps: the runs have no bf16 baseline"
    out = tmp_path / "o"
    argv = ["train-study", "--quick", "--pairs", "te-delayed@h100", "--baselines", baselines, *TINY, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baselines must include bf16" in err[0] and not out.exists()
    # without the report nothing needs bf16
    assert main(argv[:-4] + ["--no-report", "--list"]) == 0     # less --workers 1 --out, which --list refuses


def test_forks_with_too_few_steps_name_the_options(tmp_path, capsys):
    # "fork_at must be an integer from 0 (no fork) to steps - 1 = 9 ..., got 16": a field the user never gave
    out = tmp_path / "o"
    assert main(["train-study", "--quick", "--forks", "--steps", "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--forks forks at step 16 (the preset's)" in err and "give --fork-at S below 10" in err
    assert not out.exists()


def test_a_token_count_a_recipe_cannot_take_is_refused_before_any_run(tmp_path, capsys):
    # batch 1 x seq_len 8: the fp32 run trained, then te-delayed's run failed inside Dask (its traceback printed)
    out = tmp_path / "o"
    argv = ["train-study", "--quick", "--pairs", "te-delayed@h100", "--baselines", "fp32", "--seq-len", "8",
            "--batch", "1", *TINY[:-4], "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "te-delayed@h100 needs a multiple of 16 tokens per step" in err[0]
    assert "batch 1 x seq_len 8 = 8" in err[0] and not out.exists()


def test_forks_with_fewer_baseline_seeds_than_seeds_are_refused_before_training(tmp_path, capsys, monkeypatch):
    # --seeds 3 --baseline-seeds 1 trained, then each fork row said "seeds 3" and a loss over 3 seeds beside a
    # gap over seed 0 alone (lm_forks.paired_gaps: loss - bf16 loss != gap)
    monkeypatch.setattr(runs, "execute", lambda *a, **k: pytest.fail("trained"))
    out = tmp_path / "o"
    argv = ["train-study", "--quick", "--forks", "--seeds", "3", "--baseline-seeds", "1", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baseline-seeds 1 leaves seed(s) 1, 2 of --seeds 3 without one" in err[0]
    assert not out.exists()
