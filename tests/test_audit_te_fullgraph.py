"""``torch.compile(..., fullgraph=True)`` of a model with ``fp8emu.torch.te`` modules (fourteenth audit, part A).

The TE modules run eagerly under compile (a graph break around each: their GEMMs are NumPy calls), so
``fullgraph=True`` cannot hold.  Dynamo's error said "(reason: None)" with its generic hint "Remove the
`torch.compiler.disable` call", which names fp8emu's own code, not what the user can do.  Now the reason says
the cause and the ways out; without ``fullgraph`` the compiled model runs as before.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("name, make, shape", [
    ("Linear", lambda: te.Linear(64, 64), (32, 64)),
    ("LayerNorm", lambda: te.LayerNorm(64), (32, 64)),
    ("DotProductAttention", lambda: te.DotProductAttention(4, 16), None)])
def test_fullgraph_names_the_cause_and_the_ways_out(name, make, shape):
    mod = make()
    args = (torch.randn(*shape),) if shape else tuple(torch.randn(16, 2, 4, 16) for _ in range(3))
    compiled = torch.compile(mod, backend="eager", fullgraph=True)
    with pytest.raises(Exception, match=r"reason: fp8emu.torch.te's modules run eagerly under torch.compile \("
                                        r"their emulated GEMMs are NumPy calls, a graph break\): compile without "
                                        r"fullgraph=True, or emulate torch.nn.Linear layers with "
                                        r"fp8emu.torch.emulate"):
        compiled(*args)


@pytest.mark.usefixtures("fresh_dynamo")
def test_without_fullgraph_the_compiled_module_runs_as_before():
    torch.manual_seed(0)
    mod = te.Linear(64, 64)
    x = torch.randn(32, 64)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        assert torch.equal(torch.compile(mod, backend="eager")(x), mod(x))
