"""``fp8emu attention-study`` / ``lab.attention.attention_study`` with a context, distribution or
promotion interval given twice.

"contexts must be increasing" took ``64,64``, and a repeated distribution or interval ran every case
of it again: the table and the CSV held each row two or four times (the mirror of train-study's
repeated names, audit9's #5).  Now a repeated context is refused (increasing means each once) and a
repeated name or interval is run once, in the order given.
"""

from __future__ import annotations

import pytest

from fp8emu.cli import main
from fp8emu.lab.attention import attention_study

SMALL = dict(queries=2, head_dim=16, seed=0)


def _keys(rows):
    return [(r["experiment"], r["distribution"], r["context"], r["variant"]) for r in rows]


def test_a_repeated_context_is_refused():
    with pytest.raises(ValueError, match=r"contexts must be increasing \(each once\), got \(64, 64\)"):
        attention_study(contexts=(64, 64), experiments=("context",), distributions=("gaussian",), **SMALL)


def test_the_command_refuses_it_in_one_line(capsys):
    assert main(["attention-study", "--contexts", "64,64", "--queries", "2", "--head-dim", "16", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "each once" in err[0]


def test_a_repeated_distribution_or_interval_runs_once():
    rows = attention_study(contexts=(64,), experiments=("context", "promotion", "context"),
                           distributions=("gaussian", "gaussian"), promote_every=(1, 1), **SMALL)
    keys = _keys(rows)
    assert len(keys) == len(set(keys))
    # context: never / every block; promotion: every 1 and never, on the one distribution
    assert sorted(keys) == sorted([("context", "gaussian", 64, "FA3 (never promoted)"),
                                   ("context", "gaussian", 64, "FA3, promoted every block"),
                                   ("promotion", "gaussian", 64, "every 1"),
                                   ("promotion", "gaussian", 64, "never")])


def test_distinct_values_run_as_before():
    rows = attention_study(contexts=(32, 64), experiments=("context",), distributions=("outlier", "gaussian"),
                           **SMALL)
    assert [k[1:3] for k in _keys(rows)][::2] == [("outlier", 32), ("outlier", 64), ("gaussian", 32),
                                                   ("gaussian", 64)]
