"""Every notebook runs top to bottom (small SIZE); a failing cell fails the test. Outputs stay out of git."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_six_notebooks_committed_without_outputs():
    assert len(NOTEBOOKS) >= 6
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name
        assert "parameters" in nb.cells[1].metadata.get("tags", []), path.name


#: Run first in every notebook: no figure left open, the repository root as the working folder, and an
#: empty namespace (``%reset -f`` also drops the names this cell binds), so that a notebook that uses a
#: name it never defines or imports fails as it would in a fresh kernel.
_FRESH = (f"import os as _os, matplotlib.pyplot as _plt\n_plt.close('all')\n_os.chdir({str(ROOT)!r})\n"
          "%reset -f")


@pytest.fixture(scope="module")
def kernel():
    """One kernel for all the notebooks: a kernel's start and its imports of NumPy, Matplotlib and fp8emu
    took 4 s of each notebook's 6 to 13 (the modules imported stay imported; the names do not)."""
    client = nbclient.NotebookClient(nbformat.v4.new_notebook(), timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    yield client
    client.nb = nbformat.v4.new_notebook()
    client.execute(cleanup_kc=True)             # shuts the kernel down


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel):
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = "SIZE = 0.05"
    nb.cells.insert(0, nbformat.v4.new_code_cell(_FRESH))
    kernel.nb = nb
    kernel.execute(cleanup_kc=False)  # raises CellExecutionError on a failing cell
    # A cell that ends by naming a figure must show it as an image (no backend was switched to Agg).
    shown = [c for c in nb.cells if c.cell_type == "code" and c.source.rstrip().endswith("\nfig")]
    for cell in shown:
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.source[:60]
