"""`fp8emu golden ... .rle` and `fp8emu conformance` sweeping all 2^32 float32 inputs on a Dask cluster."""

from __future__ import annotations

import shutil

import pytest

from fp8emu.cli import main
from fp8emu.data import golden_path


def test_cluster_options_only_for_float32_rle_tables(tmp_path, capsys):
    assert main(["golden", "--format", "e4m3fn", "--out", str(tmp_path / "v.npz"), "--workers", "2"]) == 2
    assert "apply to .rle tables" in capsys.readouterr().err
    assert main(["golden", "--format", "e4m3fn", "--source-dtype", "float16", "--out",
                 str(tmp_path / "t.rle"), "--workers", "2"]) == 2
    assert "float32" in capsys.readouterr().err
    assert main(["golden", "--format", "e4m3fn", "--out", str(tmp_path / "t.rle"), "--workers", "0"]) == 2
    assert "argument --workers: expected an integer in 1.." in capsys.readouterr().err
    for command in ("conformance", "study", "attention-study"):
        for bad in ("0", "-3", "1e9", str(10 ** 20)):
            assert main([command, "--workers", bad]) == 2
            err = capsys.readouterr().err
            assert "argument --workers: expected an integer in 1.." in err and repr(bad) in err, err
        for bad in ("foo://h:1", "tcp://h:0", "tcp://h:65536", "", "tcp://", "a b"):
            assert main([command, "--scheduler", bad]) == 2
            assert "argument --scheduler: address" in capsys.readouterr().err


@pytest.mark.exhaustive
def test_rle_export_on_a_cluster_equals_the_table_export(tmp_path):
    pytest.importorskip("distributed")
    local, swept = tmp_path / "local.rle", tmp_path / "swept.rle"
    args = ["golden", "--format", "e2m1fn", "--profile", "cuda-satfinite", "--rounding", "rtz"]
    assert main(args + ["--out", str(local)]) == 0
    assert main(args + ["--out", str(swept), "--workers", "2"]) == 0
    assert swept.read_bytes() == local.read_bytes()


@pytest.mark.exhaustive
def test_conformance_sweep_on_a_cluster(tmp_path, capsys):
    pytest.importorskip("distributed")
    folder = tmp_path / "rec"
    folder.mkdir()
    shutil.copy(golden_path("cuda_f32_e2m1_rn.rle"), folder)
    assert main(["conformance", "--folder", str(folder), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "| `cuda_f32_e2m1_rn` | cuda-satfinite | 0 |" in out
