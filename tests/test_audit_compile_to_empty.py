"""An emulated model remade by ``Module.to_empty`` (the meta-device initialization path) runs as a new one.

``to_empty`` remakes every parameter and buffer without values.  The emulated layer's non-persistent
``fp8emu_key`` (the id the compiled op finds the layer by) then held whatever memory held: a compiled call
raised a bare ``KeyError`` even after ``load_state_dict`` restored every saved tensor (the key is not
saved), and delayed scaling's amax history and scale were uninitialized memory.  The expectations come
from models built the ordinary way (on the CPU, emulated, never remade), run eagerly.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
from fp8emu.torch import emulate, linear  # noqa: E402


def _reference():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    emulate(model, "te-delayed", "h100")
    return model


def _on_meta_then_emptied():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    emulate(model, "te-delayed", "h100")
    model.to_empty(device="cpu")
    return model


def test_a_compiled_model_loaded_after_to_empty_runs_as_the_saved_one():
    ref = _reference()
    x = torch.randn(16, 32)
    ref(x)                                   # one step: a state worth saving
    model = _on_meta_then_emptied()
    model.load_state_dict(copy.deepcopy(ref.state_dict()))
    compiled = torch.compile(model, backend="aot_eager")
    for _ in range(2):
        want, got = ref(x), compiled(x)
        assert torch.equal(want, got)
    for name, buf in ref.state_dict().items():
        assert torch.equal(buf, model.state_dict()[name]), name


def test_to_empty_leaves_the_fp8_state_of_a_new_layer():
    model = _on_meta_then_emptied()
    fresh = _reference()
    for layer, new in ((model[0], fresh[0]), (model[2], fresh[2])):
        assert linear.LAYERS[int(layer.fp8emu_key)] is layer
        for name in ("fp8emu_step", "amax_history_input", "amax_history_weight", "scale_input", "scale_weight"):
            assert torch.equal(getattr(layer, name), getattr(new, name)), name
    # with the fresh model's weights, the first steps give the fresh model's bits, eager and compiled
    with torch.no_grad():
        for p, q in zip(model.parameters(), fresh.parameters()):
            p.copy_(q)
    twin = copy.deepcopy(fresh)
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(16, 32)
    for _ in range(2):
        assert torch.equal(compiled(x), fresh(x))
    model2 = _on_meta_then_emptied()
    with torch.no_grad():
        for p, q in zip(model2.parameters(), twin.parameters()):
            p.copy_(q)
    for _ in range(2):
        assert torch.equal(model2(x), twin(x))


def test_moving_a_model_keeps_its_state():
    ref = _reference()
    x = torch.randn(16, 32)
    ref(x)
    before = copy.deepcopy(ref.state_dict())
    key = int(ref[0].fp8emu_key)
    ref.to(torch.float64).to(torch.float32)
    assert int(ref[0].fp8emu_key) == key
    for name, buf in before.items():
        assert torch.equal(buf, ref.state_dict()[name]), name
