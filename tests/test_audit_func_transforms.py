"""``torch.func`` transforms and ``torch.jit.trace`` of an emulated model are one clear error.

The emulated GEMMs are NumPy calls on the tensors' values: under ``torch.func.grad`` / ``vmap`` / ``jvp`` the
layer raised torch's "Cannot access data pointer of Tensor that doesn't have storage", and ``torch.jit.trace``
its bare "unordered_map::at".  Each is now one RuntimeError naming the layer and the way that works; a layer
that runs as the plain ``nn.Linear`` (``autocast_only`` outside ``fp8emu.torch.autocast``) still runs under
the transforms, as ``nn.Linear`` does.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
from torch.func import functional_call  # noqa: E402


def _model(autocast_only=False):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    ft.emulate(m, "te-current", "h100", autocast_only=autocast_only)
    return m


def _transforms(m, x):
    params = {k: v.detach() for k, v in m.named_parameters()}
    return {"grad": lambda: torch.func.grad(lambda p: functional_call(m, p, (x,)).square().sum())(params),
            "vmap": lambda: torch.vmap(m)(x.reshape(2, 16, 32)),
            "jvp": lambda: torch.func.jvp(m, (x,), (torch.ones_like(x),)),
            "jacrev": lambda: torch.func.jacrev(m)(x[:16])}


@pytest.mark.parametrize("name", ["grad", "vmap", "jvp", "jacrev"])
def test_a_transform_of_an_emulated_layer_is_named(name):
    m = _model()
    x = torch.randn(32, 32)
    with pytest.raises(RuntimeError, match=r"layer '0': torch.func transforms .* cannot run an emulated layer"):
        _transforms(m, x)[name]()
    # the model still runs as before (no state left behind by the refused call)
    y = m(x)
    assert torch.equal(y, _model()(x))


@pytest.mark.parametrize("name", ["grad", "vmap", "jvp"])
def test_the_plain_path_of_an_autocast_only_layer_runs_under_the_transforms(name):
    x = torch.randn(32, 32)
    m, plain = _model(autocast_only=True), _model()
    with ft.autocast(enabled=False):
        for got, want in zip(torch.utils._pytree.tree_leaves(_transforms(m, x)[name]()),
                             torch.utils._pytree.tree_leaves(_transforms(plain, x)[name]())):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_jit_trace_is_named_and_export_runs_the_eager_bits():
    m = _model()
    x, x2 = torch.randn(32, 32), torch.randn(32, 32)
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="torch.jit.trace cannot record an emulated "
                                                                      "layer"):
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.jit.trace(m, x)
    ep = torch.export.export(m, (x,))
    with torch.no_grad():
        assert torch.equal(ep.module()(x2), m(x2))


@pytest.mark.parametrize("name", ["quantize_tensorwise", "encode", "fp8_sdpa"])
def test_the_torch_in_torch_out_functions_name_a_transform(name):
    # the neighbour of the layer's fix: the same "Cannot access data pointer" from fp8emu.torch's functions
    calls = {"quantize_tensorwise": lambda t: ft.quantize_tensorwise(t, "e4m3fn"),
             "encode": lambda t: ft.encode(t, "e4m3fn"),
             "fp8_sdpa": lambda t: ft.fp8_sdpa("fa3-fp8")(t[None, None], t[None, None], t[None, None])}
    x = torch.randn(2, 32, 32)
    with pytest.raises(RuntimeError, match="torch.func transforms .* cannot run fp8emu's NumPy computations"):
        torch.vmap(calls[name])(x)
    calls[name](x[0])                      # outside the transform it runs
