"""``fp8emu.torch.te``'s modules whose state was made inside ``torch.inference_mode()`` (fourteenth audit, part A).

Each GEMM's step counter and seed (and delayed scaling's amax history and scale, made at its first call) are
buffers a call updates in place.  Made inside ``torch.inference_mode()`` (a model built in an inference script,
``quantized_model_init`` there, or delayed scaling's first call there) they were inference tensors, and the next
call outside the block, where the plain ``nn.Linear`` and TE run, was torch's "Inplace update to inference tensor
outside InferenceMode is not allowed" (audit21 fixed ``EmulatedLinear``'s buffers, not these).  Each case is
compared with the same module whose state was made outside the block: same outputs, same steps.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

RECIPES = {"current": te.recipe.Float8CurrentScaling, "delayed": te.recipe.DelayedScaling}


def _build(cls, recipe, primary):
    torch.manual_seed(0)
    if primary:
        with te.quantized_model_init(recipe=RECIPES[recipe]()):
            return cls(64, 64)
    return cls(64, 64)


def _run(mod, x, recipe, grad):
    with te.autocast(recipe=RECIPES[recipe]()), torch.set_grad_enabled(grad):
        out = mod(x)
        if grad:
            out.sum().backward()
    return out.detach()


@pytest.mark.parametrize("primary", [False, True], ids=["plain", "primary"])
@pytest.mark.parametrize("recipe", ["current", "delayed"])
@pytest.mark.parametrize("cls", [te.Linear, te.LayerNormMLP])
def test_a_module_built_in_inference_mode_runs_outside_it(cls, recipe, primary):
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        mod = _build(cls, recipe, primary)
        first = _run(mod, x, recipe, grad=False)
    ref = _build(cls, recipe, primary)
    assert torch.equal(first, _run(ref, x, recipe, grad=False))
    # outside the block: without grad, then trained (steps 1 and 2 of each GEMM)
    assert torch.equal(_run(mod, x, recipe, grad=False), _run(ref, x, recipe, grad=False))
    assert torch.equal(_run(mod, x, recipe, grad=True), _run(ref, x, recipe, grad=True))
    steps = [int(b) for n, b in mod.named_buffers() if n.endswith("fp8emu_step")]
    assert steps == [3] * (2 if cls is te.LayerNormMLP else 1)
    for (n, b), (_, r) in zip(mod.named_buffers(), ref.named_buffers()):
        assert not b.is_inference(), n
        assert torch.equal(b, r), n


def test_delayed_state_first_made_in_inference_mode_trains_after():
    # the module was built outside; its delayed-scaling buffers were made by its first call, inside the block
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(2))
    mod, ref = _build(te.Linear, "delayed", False), _build(te.Linear, "delayed", False)
    with torch.inference_mode():
        _run(mod, x, "delayed", grad=False)
    _run(ref, x, "delayed", grad=False)
    assert torch.equal(_run(mod, x, "delayed", grad=True), _run(ref, x, "delayed", grad=True))
    assert torch.equal(mod.weight.grad, ref.weight.grad)
    assert torch.equal(mod.fp8emu_gemm.amax_history_input, ref.fp8emu_gemm.amax_history_input)
    assert int(mod.fp8emu_gemm.fp8emu_step) == 2


def test_a_module_loaded_with_assign_in_inference_mode_runs_outside_it():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    ref = _build(te.Linear, "delayed", False)
    _run(ref, x, "delayed", grad=False)
    mod = te.Linear(64, 64)
    with torch.inference_mode():
        mod.load_state_dict({k: v.clone() for k, v in ref.state_dict().items()}, assign=True)
    assert torch.equal(_run(mod, x, "delayed", grad=False), _run(ref, x, "delayed", grad=False))
    assert int(mod.fp8emu_gemm.fp8emu_step) == 2
