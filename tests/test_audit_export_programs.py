"""Programs ``torch.export`` makes of an emulated model: saved and loaded, and run after the model is gone.

The exported graph calls the ``fp8emu::emulated_linear`` op with the layer's ``fp8emu_key``, by which the op
finds the live layer (its recipe, stack and state).  Two defects:

- once the model was deleted, the program raised a bare ``KeyError: 140464785466896`` (the key was the layer's
  ``id``, which Python also hands to a later object: the program could have found another layer, silently);
  now one error says the layer is gone and what a program of emulated layers needs, and keys are never reused;
- ``torch.export.save`` then ``torch.export.load`` of a model exported with autograd on failed with torch's
  "SpecViolationError: Node.meta wrap_with_set_grad_enabled is missing val field" (the op's state was copied
  back under ``torch.no_grad``, a block export records as a higher-order op); the loaded program now runs, with
  the eager bits (the expectation: an eager twin of the model).
"""

import copy
import gc
import io

import pytest

torch = pytest.importorskip("torch")
from fp8emu.torch import emulate  # noqa: E402


def _model(recipe="te-current"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    emulate(model, recipe, "h100")
    return model


def test_a_program_whose_model_is_gone_says_so():
    model = _model()
    x = torch.randn(16, 32)
    program = torch.export.export(model, (x,)).module()
    del model
    gc.collect()
    with pytest.raises(RuntimeError, match=r"fp8emu::emulated_linear: the emulated layer this graph calls \(key \d+\) "
                                           r"no longer exists; .*keep that model alive"):
        program(x)


def test_keys_are_not_reused():
    seen = set()
    for _ in range(20):
        model = _model()
        keys = {int(m.fp8emu_key) for m in (model[0], model[2])}
        assert not keys & seen
        seen |= keys
        del model
        gc.collect()


@pytest.mark.parametrize("recipe", ["te-current", "te-delayed"])
@pytest.mark.parametrize("grad", [True, False])
def test_a_saved_and_loaded_program_runs_with_the_eager_bits(recipe, grad):
    model = _model(recipe)
    twin = copy.deepcopy(model)
    x = torch.randn(16, 32)
    with torch.set_grad_enabled(grad):
        program = torch.export.export(model, (x,))
    buf = io.BytesIO()
    torch.export.save(program, buf)
    buf.seek(0)
    loaded = torch.export.load(buf).module()
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(loaded(x), twin(x))


def test_compiled_state_buffers_stay_plain_buffers():
    model, twin = _model("te-delayed"), _model("te-delayed")
    compiled = torch.compile(model, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(16, 32)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        compiled(xa).pow(2).sum().backward()
        twin(xb).pow(2).sum().backward()
        assert torch.equal(xa.grad, xb.grad)
    for (name, buf), (_, want) in zip(model.named_buffers(), twin.named_buffers()):
        assert not buf.requires_grad and buf.grad_fn is None, name
        if not name.endswith("fp8emu_key"):
            assert torch.equal(buf, want), name


def test_a_program_loaded_in_another_process_names_none_of_its_layers(tmp_path):
    import subprocess
    import sys
    model = _model()
    x = torch.randn(16, 32)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "p.pt2")
    torch.save(x, tmp_path / "x.pt")
    code = ("import torch, fp8emu.torch as ft\n"
            "models = []\n"
            "for _ in range(3):\n"
            "    m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))\n"
            "    ft.emulate(m, 'te-current', 'exact'); models.append(m)\n"
            f"p = torch.export.load({str(tmp_path / 'p.pt2')!r}).module()\n"
            f"x = torch.load({str(tmp_path / 'x.pt')!r})\n"
            "try:\n"
            "    p(x)\n"
            "    print('ran')\n"
            "except RuntimeError as e:\n"
            "    print('refused' if 'no longer exists' in str(e) else repr(e))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1:] == ["refused"], out.stdout + out.stderr
