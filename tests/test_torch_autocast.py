"""fp8emu.torch.autocast: TE fp8_autocast-style blocks over the layers emulate() prepared."""

import copy
import threading

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")


def _model(K=64, N=32, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(K, N), torch.nn.ReLU(), torch.nn.Linear(N, 16))


def _step(model, x, dy, block=None):
    xi = x.clone().requires_grad_(True)
    if block is None:
        y = model(xi)
    else:
        with block:
            y = model(xi)
    y.backward(dy)                       # after the block: the forward's recipe is kept
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return [y.detach(), xi.grad] + grads


def _same(a, b):
    return all(torch.equal(u, v) for u, v in zip(a, b))


def test_disabled_runs_the_plain_linear_layers():
    plain = _model()
    emu = copy.deepcopy(plain)
    ft.emulate(emu, "te-current", "h100")
    x, dy = torch.randn(32, 64), torch.randn(32, 16)
    assert _same(_step(emu, x, dy, ft.autocast(enabled=False)), _step(plain, x, dy))
    assert not _same(_step(emu, x, dy), _step(plain, x, dy))      # outside the block: FP8 again


def test_a_recipe_and_stack_override_equals_emulating_with_them():
    base = _model()
    emu, direct = copy.deepcopy(base), copy.deepcopy(base)
    ft.emulate(emu, "te-current", "h100")
    ft.emulate(direct, "torchao-rowwise", "exact")
    x, dy = torch.randn(32, 64), torch.randn(32, 16)
    got = _step(emu, x, dy, ft.autocast(recipe="torchao-rowwise", gpu="exact"))
    assert _same(got, _step(direct, x, dy))
    own = copy.deepcopy(base)
    ft.emulate(own, "te-current", "h100")
    assert _same(_step(emu, x, dy), _step(own, x, dy))           # restored after the block


def test_blocks_nest_and_inherit():
    base = _model()
    emu, exact_current, exact_block = copy.deepcopy(base), copy.deepcopy(base), copy.deepcopy(base)
    ft.emulate(emu, "te-current", "h100")
    ft.emulate(exact_current, "te-current", "exact")
    ft.emulate(exact_block, "te-block", "exact")
    x, dy = torch.randn(128, 64), torch.randn(128, 16)
    with ft.autocast(gpu="exact"):
        inner = _step(emu, x, dy, ft.autocast(recipe="te-block"))        # gpu inherited from the outer block
        outer = _step(emu, x, dy)
        off = _step(emu, x, dy, ft.autocast(enabled=False))
    assert _same(inner, _step(exact_block, x, dy))
    assert _same(outer, _step(exact_current, x, dy))
    assert _same(off, _step(copy.deepcopy(base), x, dy))


def test_the_state_is_per_thread():
    emu = _model()
    ft.emulate(emu, "te-current", "h100")
    x = torch.randn(16, 64)
    with torch.no_grad():
        own = emu(x)
        seen = {}
        with ft.autocast(enabled=False):
            t = threading.Thread(target=lambda: seen.setdefault("y", emu(x)))
            t.start()
            t.join()
    assert torch.equal(seen["y"], own)           # the other thread is outside this thread's block


def test_bad_input_is_refused_with_one_clear_error():
    emu = _model(K=48, N=48)
    ft.emulate(emu, "te-current", "cpu")
    x = torch.randn(32, 48)
    with pytest.raises(TypeError, match=r"^enabled must be True or False, got 1$"):
        with ft.autocast(enabled=1):
            pass
    with pytest.raises(ValueError, match=r"^recipe 'te-nvfp4' on gpu 'h100': NVFP4 needs Blackwell"):
        with ft.autocast(recipe="te-nvfp4", gpu="h100"):
            pass
    with pytest.raises(ValueError, match=r"^layer '0': in_features 48 is not a multiple of 32, which te-mxfp8 "
                                         r"on b200 needs$"):
        with ft.autocast(recipe="te-mxfp8", gpu="b200"):
            emu(x)
    with pytest.raises(ValueError, match=r"^layer '0': autocast cannot switch to 'te-delayed': delayed scaling"):
        with ft.autocast(recipe="te-delayed"):
            emu(x)
    with pytest.raises(ValueError, match=r"^unknown gpu 'a100'"):
        with ft.autocast(gpu="a100"):
            pass


# ----------------------------------------------------------------------------- TE's rule, torch.autocast
def test_autocast_only_runs_fp8_inside_the_block_only_as_transformer_engine():
    plain = _model()
    te_style, always = copy.deepcopy(plain), copy.deepcopy(plain)
    ft.emulate(te_style, "te-nvfp4", "exact", autocast_only=True)
    ft.emulate(always, "te-nvfp4", "exact")
    x, dy = torch.randn(64, 64), torch.randn(64, 16)
    assert _same(_step(te_style, x, dy), _step(plain, x, dy))              # outside: high precision
    assert int(te_style[0].fp8emu_step) == 0                                # no emulated step was taken
    # inside: the bits of a model that runs FP8 everywhere (same step, so same stochastic rounding)
    assert _same(_step(te_style, x, dy, ft.autocast()), _step(always, x, dy))
    assert _same(_step(te_style, x, dy, ft.autocast(enabled=False)), _step(plain, x, dy))
    with pytest.raises(TypeError, match="autocast_only must be True or False"):
        ft.emulate(_model(), "te-current", "h100", autocast_only="yes")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("gpu", ["h100", "cpu"])
def test_under_torch_autocast_the_output_has_nn_linear_s_dtype(dtype, gpu):
    plain = _model()
    emu = copy.deepcopy(plain)
    ft.emulate(emu, "te-current", gpu)
    x = torch.randn(32, 64)
    for inp in (x, x.double()):
        with torch.autocast("cpu", dtype=dtype):
            want = plain.to(inp.dtype)(inp).dtype
            for block in (ft.autocast(), ft.autocast(enabled=False)):
                with block:
                    assert emu.to(inp.dtype)(inp).dtype == want, (inp.dtype, block)
        plain.float()
        emu.float()
    # the value: the emulation of the input autocast hands nn.Linear (cast to its dtype)
    with torch.autocast("cpu", dtype=dtype):
        y = emu(x)
    assert torch.equal(y, emu(x.to(dtype)))
    # backward: gradients in the dtypes of the tensors they belong to
    xi = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        emu(xi).float().sum().backward()
    assert xi.grad.dtype == torch.float32 and emu[0].weight.grad.dtype == torch.float32
