"""train-study refuses ``--infer-windows`` beyond the validation split's windows, before anything runs.

The inference table evaluates evenly spaced windows of the validation split, at most one per start
(``corpus.eval_windows``): a larger count was cut to that, silently, while ``provenance.csv`` said the count
asked for.  It is one line naming the split's size and the largest count.
"""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import train_study  # noqa: E402
from fp8emu.torch.study import corpus  # noqa: E402


def _argv(out, n, corpus_file):
    return ["train-study", "--quick", "--recipes", "none", "--baselines", "bf16", "--seeds", "1", "--seq-len", "16",
            "--batch", "1", "--steps", "2", "--eval-every", "1", "--corpus", str(corpus_file), "--infer-windows",
            str(n), "--out", str(out), "--quiet"]


def test_more_windows_than_the_split_holds_are_refused(tmp_path, capsys, monkeypatch):
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"line {i}: some words of text\n" for i in range(400)), encoding="utf-8")
    val = corpus.load_corpus(str(text), min_split_bytes=17).val       # the split the table reads
    most = val.size - 16

    def trained(*a, **k):
        raise AssertionError("the study ran")
    monkeypatch.setattr(train_study.runs, "execute", trained)
    out = tmp_path / "o"
    assert main(_argv(out, most + 1, text)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--infer-windows {most + 1}" in err[0] and f"at most {most}" in err[0], err
    assert not out.exists()
    with pytest.raises(AssertionError, match="the study ran"):      # the largest count passes the checks
        main(_argv(out, most, text))
    # the cut that made the option's value false: one more window asked for, the same windows evaluated
    assert len(corpus.eval_windows(val, most + 1, 16)[0]) == len(corpus.eval_windows(val, most, 16)[0]) == most
