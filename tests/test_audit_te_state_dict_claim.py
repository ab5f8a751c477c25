"""Sixteenth audit, part A (audit27): what the module docstring of ``fp8emu.torch.te.modules`` says of TE's state
dicts.  It said "a TE ``state_dict`` of these modules loads"; TE's modules save an ``_extra_state`` entry
(``TransformerEngineBaseModule.get_extra_state`` at d0067d0: an empty uint8 tensor, or the pickled FP8 metadata) and
no ``fp8emu_*`` buffers, so ``load_state_dict(sd)`` is torch's "Unexpected key(s) ... _extra_state" / "Missing
key(s) ... fp8emu_gemm.fp8emu_step".  The docstring now says what loads and how; both are checked here."""

import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch.te as te  # noqa: E402
from fp8emu.torch.te import modules  # noqa: E402

W = 64


def _te_state_dict(module):
    """The keys TE's module saves: its parameters and ``_extra_state`` (empty outside FP8 checkpoints)."""
    sd = {n: torch.randn_like(p) for n, p in module.named_parameters()}
    sd["_extra_state"] = torch.empty(0, dtype=torch.uint8)
    return sd


@pytest.mark.parametrize("make", [lambda: te.Linear(W, W), lambda: te.LayerNormLinear(W, W),
                                  lambda: te.LayerNormMLP(W, 2 * W)])
def test_a_te_state_dict_loads_as_the_docstring_says(make):
    doc = " ".join(modules.__doc__.split())
    assert "load with ``load_state_dict(sd, strict=False)``" in doc and "``_extra_state``" in doc
    torch.manual_seed(0)
    m = make()
    sd = _te_state_dict(m)
    with pytest.raises(RuntimeError, match=r"(?s)Missing key\(s\).*fp8emu_.*Unexpected key\(s\).*_extra_state"):
        m.load_state_dict(sd)
    result = m.load_state_dict(sd, strict=False)
    assert result.unexpected_keys == ["_extra_state"]
    assert result.missing_keys and all(".fp8emu_" in k for k in result.missing_keys)
    for n, p in m.named_parameters():
        assert torch.equal(p, sd[n]), n
    # the GEMM state starts new and the module runs
    with te.autocast(recipe=te.recipe.DelayedScaling()):
        m(torch.randn(W, W))
