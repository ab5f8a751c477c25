"""Hostile input: ``validate-gpu`` when every case is skipped (no library could cast)."""

import json

from fp8emu.cli import main
from fp8emu.gpu import validate


def _all_skipped(limit=None, out=print, *, scaled_mm=True, chunk_bits=24, progress=False):
    # a GPU whose torch, Triton and JAX cannot build one cast (gpu_cases' "unavailable"), --no-scaled-mm
    case = validate.CastCase("torch", "e4m3fn", "torch", "rne", "float16", None, "unavailable: AttributeError")
    return validate.run([case], None, out=out), "test double"


def test_every_case_skipped_is_nothing_validated_not_all_matched(tmp_path, monkeypatch, capsys):
    # before: exit 0, which the module docstring calls "every case compared and matched", with nothing compared
    monkeypatch.setattr(validate, "validate", _all_skipped)
    report = tmp_path / "r.json"
    assert main(["validate-gpu", "--no-scaled-mm", "--json", str(report)]) == validate.EXIT_NO_GPU == 3
    assert "| skipped: unavailable: AttributeError |" in capsys.readouterr().out
    d = json.loads(report.read_text())
    assert d["gpu"] is True and d["exit_status"] == 3 and [r["status"] for r in d["results"]] == ["skipped"]
    assert main(["validate-gpu", "--no-scaled-mm", "--require-gpu"]) == validate.EXIT_MISMATCH == 1
    skipped = validate.CaseResult(**d["results"][0])
    ok = validate.CaseResult("torch", "cast", "y", "p", status="ok", inputs=1)
    assert validate.exit_status([skipped, ok]) == validate.EXIT_OK      # a skipped library beside a compared case
