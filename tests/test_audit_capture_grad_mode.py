"""Fourth fresh audit: ``probes.capture`` names a layer run with autograd off inside the model's forward."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


class _NoGradInside(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.a, self.b, self.mode = nn.Linear(8, 8), nn.Linear(8, 2), mode

    def forward(self, x):
        with self.mode():
            h = self.a(x)
        return self.b(torch.tanh(h.clone()))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_a_layer_run_without_autograd_is_named_as_such(mode):
    # before: "layer 'a' ran in the forward but its output does not reach the loss", where its output is
    # the loss's input (through b): false
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"layer 'a' ran with autograd off \(under torch.no_grad\(\) or "
                                         r"torch.inference_mode\(\) inside"):
        probes.capture(_NoGradInside(mode), lambda m: m(x).sum())


def test_a_layer_whose_output_is_unused_is_still_said_not_to_reach_the_loss():
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

        def forward(self, x):
            self.a(x)
            return self.b(x)
    with pytest.raises(ValueError, match=r"layer 'a' ran in the forward but its output does not reach the loss"):
        probes.capture(Unused(), lambda m: m(torch.randn(4, 8)).sum())
