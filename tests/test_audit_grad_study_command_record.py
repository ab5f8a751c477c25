"""``grad-study``'s provenance records the command as it was given, quoted.

``--kinds "probe, bias"`` was recorded as ``fp8emu grad-study --quick --kinds probe, bias``: run again, that
command is argparse's "unrecognized arguments: bias" (train-study quotes its command with ``shlex.join``).
The study itself is patched out (``execute`` and the report); what is checked is the command recorded.
"""

import shlex

import pytest

pytest.importorskip("torch")
from fp8emu.cli import grad_study as cli  # noqa: E402
from fp8emu.cli import main  # noqa: E402


@pytest.mark.parametrize("kinds", ["probe, bias", "probe", " eden ,operands"])
def test_the_command_recorded_splits_back_into_the_options_given(kinds, tmp_path, monkeypatch):
    got = {}
    monkeypatch.setattr(cli, "execute", lambda out, cfg, cells, **kw: {"rows": {}, "computed": 0, "skipped": 0})
    monkeypatch.setattr(cli.report, "write_report", lambda tables, out, prov: got.update(prov))
    assert main(["grad-study", "--quick", "--kinds", kinds, "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert shlex.split(got["command"]) == ["fp8emu", "grad-study", "--quick", "--kinds", kinds]


def test_without_kinds_the_command_is_as_before(tmp_path, monkeypatch):
    got = {}
    monkeypatch.setattr(cli, "execute", lambda out, cfg, cells, **kw: {"rows": {}, "computed": 0, "skipped": 0})
    monkeypatch.setattr(cli.report, "write_report", lambda tables, out, prov: got.update(prov))
    assert main(["grad-study", "--quick", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert got["command"] == "fp8emu grad-study --quick"
