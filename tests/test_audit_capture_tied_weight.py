"""Fourth fresh audit: ``probes.capture`` of a layer whose weight also reaches the loss outside the layer
(an embedding tied to ``lm_head``, a penalty on the weight in ``loss_fn``)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


class _TiedHead(nn.Module):
    """A GPT's tying: the output layer's weight is the token embedding."""

    def __init__(self, tied=True):
        super().__init__()
        self.emb, self.head = nn.Embedding(32, 16), nn.Linear(16, 32, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, t):
        return self.head(torch.tanh(self.emb(t)))


def _loss(t):
    return lambda m: nn.functional.cross_entropy(m(t), t)


def test_a_weight_tied_to_an_embedding_is_refused_not_given_the_sum():
    # before: dw was weight.grad, the head's wgrad plus the embedding's gradient (off by 0.073 where the
    # head's own wgrad dy^T x is at most 0.067)
    torch.manual_seed(0)
    t = torch.randint(0, 32, (8,))
    with pytest.raises(ValueError, match=r"the weight of layer 'head' reaches the loss outside the layer too"):
        probes.capture(_TiedHead(), _loss(t))


def test_a_penalty_on_the_weight_in_the_loss_is_refused():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(5, 8)
    with pytest.raises(ValueError, match=r"the weight of layer '2' reaches the loss outside the layer too"):
        probes.capture(m, lambda mm: mm(x).square().sum() + 1e-2 * mm[2].weight.square().sum())
    # a penalty on the bias leaves dw the layer's own wgrad: captured, dw = dy^T x in float64
    _, caps = probes.capture(m, lambda mm: mm(x).square().sum() + 1e-2 * mm[2].bias.square().sum())
    c = caps["2"]
    assert np.allclose(c.dw, c.dy.astype(np.float64).T @ c.x.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_an_untied_head_is_captured_with_its_own_wgrad():
    torch.manual_seed(0)
    t = torch.randint(0, 32, (8,))
    _, caps = probes.capture(_TiedHead(tied=False), _loss(t))
    c = caps["head"]
    assert np.allclose(c.dw, c.dy.astype(np.float64).T @ c.x.astype(np.float64), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("recipe", ["te-delayed", "te-current", "te-mxfp8", "torchao-rowwise"])
@pytest.mark.parametrize("make", ["emulated_model", "qat_model"])
def test_emulated_and_qat_layers_use_their_weight_once(recipe, make):
    # the check counts the weight's paths into the loss's graph: an emulated or QAT layer has one per call
    torch.manual_seed(0)
    m = getattr(probes, make)(nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64)), recipe, "b200")
    x = torch.randn(32, 64)
    _, caps = probes.capture(m, lambda mm: mm(x).square().mean())
    assert sorted(caps) == ["0", "2"]
