"""``fp8emu.torch.te``'s modules built under ``torch.device("meta")`` (fourteenth audit, part A).

Called inside ``te.autocast`` before ``to_empty``, their FP8 path read the meta tensors with ``int()`` or NumPy:
torch's bare "Tensor.item() cannot be called on meta tensors" (``Linear``; an FP8 primary weight even outside
autocast) or "Tensor on device meta is not on the expected device cpu!" (the norms), naming no module and no
cause.  Now one line names the module and its meta tensors.  And ``to_empty``, the next step of that path, left
each GEMM's step counter and stochastic-rounding seed as whatever memory held (seeds like 94598123463712): a model
built after ``torch.manual_seed`` no longer rounded the same way every run.  Now such a GEMM starts as a new one.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

CLASSES = {"Linear": (te.Linear, (64, 64)), "LayerNormLinear": (te.LayerNormLinear, (64, 64)),
           "LayerNormMLP": (te.LayerNormMLP, (64, 64)), "LayerNorm": (te.LayerNorm, (64,)),
           "RMSNorm": (te.RMSNorm, (64,))}


def _meta(name):
    cls, args = CLASSES[name]
    with torch.device("meta"):
        return cls(*args)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", list(CLASSES))
def test_meta_parameters_are_named_inside_autocast(name, grad):
    mod = _meta(name)
    first = {"Linear": "weight", "LayerNormMLP": "layer_norm_weight", "LayerNormLinear": "layer_norm_weight",
             "LayerNorm": "weight", "RMSNorm": "weight"}[name]
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()), torch.set_grad_enabled(grad), pytest.raises(
            ValueError, match=rf"^{name}: its {first}(, .*)? (is a meta tensor|are meta tensors) \(a shape without "
                              r"values\): a model built "
                              r"on the meta device needs model.to_empty\(device=...\)"):
        mod(torch.randn(16, 64))


def test_a_meta_primary_weight_is_named_outside_autocast():
    with torch.device("meta"), te.quantized_model_init(recipe=te.recipe.Float8CurrentScaling()):
        mod = te.Linear(64, 64)
    with pytest.raises(ValueError, match=r"^Linear: its weight, bias, fp8emu_gemm.fp8emu_step, "
                                         r"fp8emu_gemm.fp8emu_seed are meta tensors"):
        mod(torch.randn(16, 64))


def test_refreshing_meta_primary_weights_is_named():
    with torch.device("meta"), te.quantized_model_init(recipe=te.recipe.Float8CurrentScaling()):
        model = torch.nn.Sequential(te.Linear(64, 64), te.LayerNormMLP(64, 64))
    with pytest.raises(ValueError, match=r"^Linear: its weight, bias, .* are meta tensors"):
        te.refresh_primary_weights(model)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    assert te.refresh_primary_weights(model) == 3       # Linear's weight, LayerNormMLP's fc1 and fc2


def test_meta_high_precision_path_is_torchs_as_before():
    # outside autocast the module is torch's F.linear, as TE's and nn.Linear's: torch's own device error
    with pytest.raises(RuntimeError, match="meta"):
        _meta("Linear")(torch.randn(16, 64))


def _to_empty_and_init(seed):
    torch.manual_seed(seed)
    with torch.device("meta"):
        mod = te.Linear(64, 64)
    # fill the allocator's free small blocks with -7: uninitialized int64 scalars made next read -7, not 0
    junk = [torch.full((), -7, dtype=torch.int64) for _ in range(64)]
    del junk
    mod.to_empty(device="cpu")
    with torch.no_grad():
        torch.nn.init.normal_(mod.weight, 0.0, 0.023)
        mod.bias.zero_()
    return mod


def test_to_empty_starts_each_gemm_as_a_new_one():
    a, b = _to_empty_and_init(5), _to_empty_and_init(5)
    for mod in (a, b):
        assert int(mod.fp8emu_gemm.fp8emu_step) == 0
        assert 0 <= int(mod.fp8emu_gemm.fp8emu_seed) < 2**62
    # the seed is drawn from torch's generator, as at construction: the same seed after the same manual_seed
    assert int(a.fp8emu_gemm.fp8emu_seed) == int(b.fp8emu_gemm.fp8emu_seed)
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    grads = []
    for mod in (a, b):      # NVFP4 rounds its gradients stochastically: the seed and the step decide the bits
        with te.autocast(recipe=te.recipe.NVFP4BlockScaling(), gpu="b200"):
            mod(x).square().sum().backward()
        grads.append(mod.weight.grad)
    assert torch.equal(grads[0], grads[1])
    assert int(a.fp8emu_gemm.fp8emu_step) == 1


def test_to_empty_then_a_load_restores_the_saved_state_as_before():
    torch.manual_seed(0)
    ref = te.Linear(64, 64)
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(2))
    with te.autocast(recipe=te.recipe.DelayedScaling()):
        ref(x)
    mod = _to_empty_and_init(9)
    mod.load_state_dict(ref.state_dict())
    assert int(mod.fp8emu_gemm.fp8emu_step) == 1
    assert int(mod.fp8emu_gemm.fp8emu_seed) == int(ref.fp8emu_gemm.fp8emu_seed)
    with te.autocast(recipe=te.recipe.DelayedScaling()):
        assert torch.equal(mod(x), ref(x))
