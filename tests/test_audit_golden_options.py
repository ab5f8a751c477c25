"""``fp8emu golden``: options the chosen output does not use.

With ``--scaled-mm`` the vector options (``--format``, ``--profile``, ``--source-dtype``, ``--rounding``,
``--saturate``, ``--sr-bits``, ``--exhaustive``, ``--name``) were taken and ignored; without it
``--a-format``, ``--b-format`` and ``--accumulators`` were; ``--name`` (a C header's prefix) was
ignored by ``.json`` and ``.npz``; ``--accumulators hopper hopper`` listed the accumulator twice in the
file.  Each wrote a file that did not say what the command line asked for.
"""

from __future__ import annotations

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.testing import golden


@pytest.mark.parametrize("extra", [["--format", "e5m2"], ["--profile", "torch-cuda"], ["--rounding", "rtz"],
                                   ["--source-dtype", "float16"], ["--saturate"], ["--sr-bits", "3"],
                                   ["--exhaustive"], ["--name", "foo"]])
def test_scaled_mm_refuses_the_vector_options(tmp_path, capsys, extra):
    out = tmp_path / "s.npz"
    assert main(["golden", "--scaled-mm", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{extra[0]} does not apply to --scaled-mm" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("extra", [["--a-format", "e5m2"], ["--b-format", "e5m2"], ["--accumulators", "fp32"]])
def test_vectors_refuse_the_gemm_options(tmp_path, capsys, extra):
    out = tmp_path / "g.npz"
    assert main(["golden", "--format", "e4m3fn", "--out", str(out), *extra]) == 2
    assert f"{extra[0]} does not apply to golden vectors" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("ext", [".json", ".npz"])
def test_name_applies_to_c_headers_only(tmp_path, capsys, ext):
    assert main(["golden", "--format", "e4m3fn", "--name", "foo", "--out", str(tmp_path / f"g{ext}")]) == 2
    assert "--name prefixes a C header's identifiers" in capsys.readouterr().err
    assert main(["golden", "--format", "e4m3fn", "--name", "foo", "--out", str(tmp_path / "g.h")]) == 0
    assert "foo_input_bits" in (tmp_path / "g.h").read_text()


def test_an_accumulator_given_twice_is_written_once(tmp_path, capsys):
    out = tmp_path / "s.npz"
    assert main(["golden", "--scaled-mm", "--out", str(out), "--accumulators", "exact", "fp32", "exact"]) == 0
    with np.load(out) as z:
        assert z["accumulators"].tolist() == ["exact", "fp32"]


def test_the_defaults_write_what_they_wrote_before(tmp_path, capsys):
    out = tmp_path / "g.npz"
    assert main(["golden", "--format", "e4m3fn", "--out", str(out)]) == 0
    g = golden.load_golden(out)
    assert (g["profile"], g["source_dtype"], g["rounding"]) == ("ocp", "float32", "rne")
    s = tmp_path / "s.npz"
    assert main(["golden", "--scaled-mm", "--out", str(s), "--seed", "3", "--a-format", "e5m2"]) == 0
    with np.load(s) as z:
        assert z["accumulators"].tolist() == ["hopper", "hopper-fast"]
        assert str(z["a_format"]) == "e5m2" and str(z["b_format"]) == "e4m3fn"
