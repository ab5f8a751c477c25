"""Seventeenth audit (audit29): the torch guide said of ``ft.autocast`` "Blocks nest, arguments left out are
inherited", but ``enabled`` left out is True (as TE's ``fp8_autocast(enabled=True)``, innermost block wins), so
``ft.autocast(gpu="b200")`` inside ``ft.autocast(enabled=False)`` runs FP8; only ``recipe`` and ``gpu`` are
inherited.  The behaviour is TE's; the guide now says which arguments are inherited."""
import pathlib

import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch as ft  # noqa: E402

GUIDE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "torch.md"


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, "te-current", "h100")
    return model


def test_enabled_is_not_inherited_recipe_and_gpu_are():
    model, x = _model(), torch.randn(32, 64)
    plain = torch.nn.functional.linear(x, model[0].weight, model[0].bias)
    with ft.autocast(gpu="b200"):
        b200 = model(x)
    with ft.autocast(enabled=False):
        with ft.autocast(gpu="b200"):
            inner = model(x)                 # enabled left out: FP8 again, on b200
        with ft.autocast(recipe="te-current"):
            off = model(x)                   # still FP8 (enabled defaults to True)
    with ft.autocast(gpu="b200"):
        with ft.autocast():
            inherited = model(x)             # gpu inherited from the outer block
    assert torch.equal(inner, b200) and not torch.equal(inner, plain)
    assert not torch.equal(off, plain)
    assert torch.equal(inherited, b200)


def test_the_guide_says_which_arguments_are_inherited():
    text = " ".join(GUIDE.read_text().split())
    assert "Blocks nest, arguments left out are inherited" not in text
    assert ("`recipe` and `gpu` left out are inherited from the enclosing block, while `enabled` is True unless "
            "given") in text
