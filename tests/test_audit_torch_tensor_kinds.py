"""Torch tensors without one dense array of values, read by fp8emu (fifteenth audit, part A).

``fp8emu.torch``'s functions (and the NumPy API, which reads torch tensors through the same
``fp8emu.interop.to_numpy``) passed such tensors to torch's ``.numpy()``: a nested tensor was torch's "Internal
error: NestedTensorImpl doesn't support sizes. Please file an issue.", a quantized one "Got unsupported ScalarType
QUInt8", a ``torch.bits8`` one "Got unsupported ScalarType Bits8", a sparse one torch's message naming no argument.
Each is now one TypeError naming the argument, what it is and what to pass (the emulated layer already refused
sparse and nested inputs by name).
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import fp8emu  # noqa: E402
import fp8emu.torch as ft  # noqa: E402


def _kinds():
    # torch warns that sparse CSR is beta, nested tensors a prototype and quantized tensors deprecated: they exist
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return _made()


def _quantized(dense):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.quantize_per_tensor(dense, 0.5, 0, torch.quint8)


def _made():
    dense = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    return {
        "sparse_coo": (dense.to_sparse(), r"^x is a torch.sparse_coo \(sparse or opaque\) tensor, which has no one "
                                          r"dense array of values to read; pass x.to_dense\(\)$"),
        "sparse_csr": (dense.to_sparse_csr(), r"^x is a torch.sparse_csr .*pass x.to_dense\(\)$"),
        "nested": (torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
                   r"^x is a nested \(torch.nested\) tensor, which has no one dense array of values to read; pass its "
                   r"components one at a time \(x.unbind\(\)\)$"),
        "quantized": (_quantized(dense),
                      r"^x is a quantized tensor \(torch.quint8\), whose integers are not its values; pass "
                      r"x.dequantize\(\)$"),
        "bits8": (torch.tensor([1, 2], dtype=torch.uint8).view(torch.bits8),
                  r"^x: a torch.bits8 tensor has no NumPy counterpart to read; pass a bool, integer or floating-point "
                  r"tensor"),
    }


@pytest.mark.parametrize("kind", list(_kinds()))
def test_each_kind_is_one_error_naming_the_argument(kind):
    x, msg = _kinds()[kind]
    for call in (lambda: ft.encode(x, "e4m3fn"), lambda: ft.quantize(x, "e4m3fn"),
                 lambda: ft.quantize_tensorwise(x, "e4m3fn"), lambda: fp8emu.encode(x, "e4m3fn")):
        with pytest.raises(TypeError, match=msg):
            call()


def test_the_operand_is_named_as_the_caller_names_it():
    a = torch.ones(16, 16).to_sparse()
    b = ft.encode(torch.ones(16, 16), "e4m3fn").t()
    with pytest.raises(TypeError, match=r"^a is a torch.sparse_coo"):
        ft.scaled_mm(a, b, scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0))


def test_the_ways_out_work_and_dense_tensors_are_as_before():
    dense = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    want = ft.encode(dense, "e4m3fn").view(torch.uint8)
    assert torch.equal(ft.encode(dense.to_sparse().to_dense(), "e4m3fn").view(torch.uint8), want)
    q = _quantized(dense)
    assert torch.equal(ft.encode(q.dequantize(), "e4m3fn").view(torch.uint8), want)
    parts = [ft.quantize(p, "e4m3fn") for p in _kinds()["nested"][0].unbind()]
    assert [p.tolist() for p in parts] == [[1.0, 1.0], [1.0, 1.0, 1.0]]
    # integer, unsigned, bool and narrow-float tensors are read as before
    for t in (torch.tensor([1, 2]), torch.tensor([1, 2], dtype=torch.uint16), torch.tensor([True, False]),
              torch.tensor([1.0, 2.0]).to(torch.float8_e5m2)):
        assert np.array_equal(ft.quantize(t, "e4m3fn").numpy(), np.array([1.0, 2.0]) if t.dtype != torch.bool
                              else np.array([1.0, 0.0]))
