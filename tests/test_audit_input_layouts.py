"""A sparse or nested input to an emulated layer: one error where it would compute FP8, ``nn.Linear``'s call where not.

``nn.Linear`` takes a sparse COO / CSR input and a nested tensor (torch's ``linear`` has kernels for them).  An
emulated layer's GEMMs are NumPy calls on one dense array, which such a tensor has not: the layer raised torch's
bare "unsupported memory format option Contiguous" (sparse, from the recompute cache's key), ".numpy() is not
supported for tensor subclasses" (a jagged nested tensor), "NestedTensorImpl doesn't support sizes" (a strided
one) and, compiled, the custom op's bare ``NotImplementedError: fp8emu.emulated_linear.default``.  Now it is one
``TypeError`` naming the layer and the layout; inside ``autocast(enabled=False)`` and outside ``autocast`` with
``autocast_only=True``, where the layer computes as the plain ``nn.Linear``, it gives that layer's result.
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _models(autocast_only=False):
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(32, 32))
    model = copy.deepcopy(plain)
    ft.emulate(model, "te-current", "h100", autocast_only=autocast_only)
    return plain, model


def _inputs():
    torch.manual_seed(1)
    dense = torch.randn(16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # torch's "nested tensors ... prototype stage" of the strided layout
        strided_nested = torch.nested.nested_tensor([torch.randn(3, 32), torch.randn(5, 32)])
    return {"sparse_coo": dense.to_sparse(), "sparse_csr": dense.to_sparse_csr(),
            "jagged": torch.nested.nested_tensor([torch.randn(3, 32), torch.randn(5, 32)], layout=torch.jagged),
            "nested_strided": strided_nested}


@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "jagged", "nested_strided"])
@pytest.mark.parametrize("grad", [False, True])
def test_emulated_call_is_one_error(kind, grad):
    _, model = _models()
    x = _inputs()[kind]
    with torch.set_grad_enabled(grad), pytest.raises(TypeError, match=r"layer '0': input is a .*(sparse|nested).* "
                                                                      r"tensor; .*pass a dense tensor"):
        model(x)


@pytest.mark.parametrize("kind", ["sparse_coo", "jagged"])
def test_compiled_call_is_one_error(kind):
    torch._dynamo.reset()
    _, model = _models()
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad(), pytest.raises(TypeError, match=r"layer '0': input is a .*tensor; .*pass a dense tensor"):
        compiled(_inputs()[kind])


@pytest.mark.parametrize("kind", ["sparse_coo", "jagged"])
def test_plain_call_takes_them(kind):
    x = _inputs()[kind]
    plain, model = _models(autocast_only=True)
    with torch.no_grad():
        want = plain(x)
        got_outside = model(x)                          # autocast_only: the plain nn.Linear outside autocast
        _, model2 = _models()
        with ft.autocast(enabled=False):
            got_disabled = model2(x)
    for got in (got_outside, got_disabled):
        if kind == "jagged":
            assert all(torch.equal(a, b) for a, b in zip(got.unbind(), want.unbind()))
        else:
            assert torch.equal(got, want)


def test_dense_input_as_before():
    plain, model = _models()
    x = _inputs()["sparse_coo"].to_dense()
    with torch.no_grad():
        assert model(x).shape == plain(x).shape == (16, 32)
