"""``torch.fx.symbolic_trace`` of an emulated model: one error that names the tracer, not the input.

FX traces into modules outside ``torch.nn``, so the emulated layer received a ``torch.fx.Proxy`` and said "input
must be a float32, bfloat16, float16 or float64 tensor, got Proxy", blaming an input that is a float tensor at run
time.  Now the error names ``torch.fx.symbolic_trace`` and what works; a tracer that keeps the layer a leaf module
gives a graph that calls it, with the eager bits (the expectation: the model itself).
"""

import pytest

torch = pytest.importorskip("torch")
from torch_models import small_mlp  # noqa: E402
from fp8emu.torch.linear import EmulatedLinear  # noqa: E402


def _model():
    return small_mlp("te-current", "h100")


def test_symbolic_trace_is_one_error_naming_the_tracer():
    with pytest.raises(TypeError, match=r"layer '0': torch.fx.symbolic_trace cannot trace into an emulated layer"):
        torch.fx.symbolic_trace(_model())


def test_a_tracer_keeping_the_layer_a_leaf_gives_the_eager_bits():
    class Leaf(torch.fx.Tracer):
        def is_leaf_module(self, m, name):
            return isinstance(m, EmulatedLinear) or super().is_leaf_module(m, name)

    model = _model()
    gm = torch.fx.GraphModule(model, Leaf().trace(model))
    x = torch.randn(16, 32)
    with torch.no_grad():
        assert torch.equal(gm(x), model(x))


def test_other_inputs_keep_their_message():
    with pytest.raises(TypeError, match="input must be a float32, bfloat16, float16 or float64 tensor, got int"):
        _model()(3)
