"""Empty batches and sequences through TE's attention modules (fourteenth audit, part A).

``DotProductAttention`` and ``MultiheadAttention`` reshaped their heads with ``-1``: a batch or a sequence of 0
was torch's "cannot reshape tensor of 0 elements into shape [0, 2, -1, 16] because the unspecified dimension size
-1 can be any value and is ambiguous", in and out of ``autocast``, where ``te.Linear`` and the other modules take
an empty batch.  Now the output is empty with its shape, and the gradients are zero.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

SHAPES = [(0, 2, 64), (16, 0, 64)]


def _module(kind):
    torch.manual_seed(0)
    if kind == "TransformerLayer":
        return te.TransformerLayer(64, 128, 4, hidden_dropout=0.0, attention_dropout=0.0)
    return te.MultiheadAttention(64, 4, attention_dropout=0.0, input_layernorm=kind == "MHA+norm",
                                 num_gqa_groups=2, qkv_weight_interleaved=kind != "MHA, not interleaved")


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["TransformerLayer", "MHA", "MHA+norm", "MHA, not interleaved"])
def test_an_empty_batch_or_sequence_gives_an_empty_output(kind, shape, fp8):
    mod = _module(kind)
    x = torch.randn(*shape, requires_grad=True)
    with te.autocast(enabled=fp8, recipe=te.recipe.Float8CurrentScaling()):
        y = mod(x)
    assert y.shape == shape
    y.sum().backward()
    assert x.grad.shape == shape
    for n, p in mod.named_parameters():
        assert p.grad is None or not bool(p.grad.any()), n


@pytest.mark.parametrize("fmt, shape", [("sbhd", (0, 2, 4, 16)), ("sbhd", (8, 0, 4, 16)), ("bshd", (0, 8, 4, 16)),
                                        ("bshd", (2, 0, 4, 16))])
def test_dot_product_attention_of_an_empty_batch_or_sequence(fmt, shape):
    dpa = te.DotProductAttention(4, 16, qkv_format=fmt)
    q = torch.randn(*shape)
    assert dpa(q, q, q).shape == (*shape[:2], 64)


def test_a_non_empty_batch_is_as_before():
    # one token of the sequence attends to itself only (causal): the output is v's row, as torch's sdpa gives it
    dpa = te.DotProductAttention(4, 16)
    q, k, v = (torch.randn(1, 2, 4, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    assert torch.allclose(dpa(q, k, v), v.reshape(1, 2, 64))
