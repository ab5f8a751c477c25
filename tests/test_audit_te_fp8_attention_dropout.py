"""``te.DotProductAttention`` with a recipe's ``fp8_dpa=True`` and attention dropout in training mode.

The FP8 attention (``fp8emu.torch.fp8_sdpa``) has no dropout: in training mode with ``attention_dropout`` > 0
the high-precision path drops attention probabilities, the FP8 path silently did not (two calls gave the
same output).  It is one error naming the dropout and the ways out; in eval mode, or with no dropout, FP8
attention runs as before.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402


def _qkv():
    torch.manual_seed(0)
    return [torch.randn(16, 2, 4, 16) for _ in range(3)]


def test_fp8_attention_with_dropout_in_training_mode_is_refused():
    dpa = te.DotProductAttention(4, 16, attention_dropout=0.5)
    with torch.no_grad(), te.autocast(recipe=te.recipe.DelayedScaling(fp8_dpa=True)):
        with pytest.raises(ValueError, match=r"has no dropout, and attention_dropout=0.5 in training mode would "
                                             r"be ignored"):
            dpa(*_qkv())


def test_in_eval_mode_or_without_dropout_it_runs_as_before():
    q, k, v = _qkv()
    want = te.DotProductAttention(4, 16, attention_dropout=0.0)
    with torch.no_grad(), te.autocast(recipe=te.recipe.DelayedScaling(fp8_dpa=True)):
        ref = want(q, k, v)
        assert torch.equal(te.DotProductAttention(4, 16, attention_dropout=0.5).eval()(q, k, v), ref)
        layer = te.TransformerLayer(64, 128, 4).eval()          # TE's default attention dropout, 0.1
        assert layer(torch.randn(16, 2, 64)).shape == (16, 2, 64)
