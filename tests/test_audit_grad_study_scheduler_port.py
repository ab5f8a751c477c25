"""``fp8emu grad-study --scheduler`` with a host and no port (``localhost``, ``tcp://10.0.0.5``).

The form check takes a host without a port ("the port, where given"); Dask's ``Client`` then raised its bare
"missing port number in address 'localhost'", which named neither the option nor the form an address needs.
"""

import pytest

pytest.importorskip("torch")
pytest.importorskip("distributed")
from fp8emu.cli import grad_study, main  # noqa: E402


@pytest.mark.parametrize("address", ["localhost", "tcp://10.0.0.5"])
def test_an_address_without_a_port_names_the_scheduler_and_the_form(tmp_path, capsys, monkeypatch, address):
    monkeypatch.setattr(grad_study, "execute", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["grad-study", "--quick", "--kinds", "spike", "--scheduler", address, "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fp8emu grad-study: error: scheduler {address!r}: missing port number")
    assert "host:port, e.g. tcp://127.0.0.1:8786" in err[0]

