"""A grad-study cell file under another cell's name is named as that, not as another configuration.

A cell file of the study renamed or copied over another cell's file (as a file manager or a hand-made
backup does) was refused as "belongs to another study configuration; use another --out or delete the
folder": false (the configuration is the same), and its advice threw away every cell for one file.  It is
"holds cell A of this study, not B ...; delete it to rerun its cell"; a file of another configuration
keeps its line.
"""

import shutil

import pytest

pytest.importorskip("torch")
from fp8emu.cli import grad_study as cli  # noqa: E402
from fp8emu.torch.study import grad  # noqa: E402

_A = {"kind": "probe", "pair": "te-current@h100", "state": 0}
_B = {"kind": "probe", "pair": "te-current@h100", "state": 20}
_ROWS = {"probes": [{"gemm": "fprop", "rel_err": 0.25}]}


def test_a_cell_file_renamed_to_another_cells_name_is_named_as_that(tmp_path):
    a = cli.write_cell(tmp_path, "abc", _A, _ROWS)
    b = tmp_path / "cells" / f"{grad.cell_id(_B)}.json"
    shutil.copyfile(a, b)
    with pytest.raises(ValueError) as e:
        cli.read_cell(b, "abc", _B)
    msg = str(e.value)
    assert "holds cell probe_pair=te-current-at-h100_state=0 of this study, not " \
           "probe_pair=te-current-at-h100_state=20" in msg and "delete it to rerun its cell" in msg
    assert "another study configuration" not in msg and "delete the folder" not in msg
    assert cli.read_cell(a, "abc", _A) == _ROWS          # the file under its own name is read


def test_a_cell_file_of_another_configuration_keeps_its_line(tmp_path):
    a = cli.write_cell(tmp_path, "abc", _A, _ROWS)
    with pytest.raises(ValueError, match="belongs to another study configuration"):
        cli.read_cell(a, "def", _A)
