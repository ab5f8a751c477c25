"""What activation checkpointing's recompute cannot replay is said, not run silently as a new call.

An emulated layer replays a recompute whose input equals one of its last 16 calls'.  A checkpointed segment
that calls one layer more than 16 times (a weight-shared block applied in a loop) recomputed its first calls
as new ones: the step counter and delayed scaling's state advanced, the recomputed output differed, so every
later call of the segment missed too and the gradients differed from the same step without checkpointing,
silently.  Such a recompute warns, naming the layer and why.
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _loop(model, x, n):
    for _ in range(n):
        x = torch.tanh(model(x))
    return x


def _pair(recipe, gpu):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 64))
    ft.emulate(base, recipe, gpu)
    return copy.deepcopy(base), copy.deepcopy(base)


def test_a_segment_calling_a_layer_more_often_than_it_keeps_warns_that_its_recompute_is_a_new_call():
    plain, ckpt = _pair("te-delayed", "h100")
    x = torch.randn(64, 64)
    _loop(plain, x, 20).square().mean().backward()
    with pytest.warns(RuntimeWarning, match=r"layer '0'.*none of the layer's last 16 calls"):
        checkpoint(lambda v: _loop(ckpt, v, 20), x, use_reentrant=False).square().mean().backward()
    # what the warning is about: the recompute advanced the state (20 calls, 40 steps)
    assert int(plain[0].fp8emu_step) == 20 and int(ckpt[0].fp8emu_step) > 20


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_segment_within_the_kept_calls_replays_without_a_warning(reentrant):
    plain, ckpt = _pair("te-delayed", "h100")
    x = torch.randn(64, 64)
    _loop(plain, x, 16).square().mean().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        checkpoint(lambda v: _loop(ckpt, v, 16), x.clone().requires_grad_(reentrant),
                   use_reentrant=reentrant).square().mean().backward()
    assert int(ckpt[0].fp8emu_step) == 16
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), ckpt.parameters()))


def test_the_torch_guide_states_the_number_of_calls_kept():
    from pathlib import Path

    from fp8emu.torch import linear

    text = " ".join((Path(__file__).parent.parent / "docs" / "guides" / "torch.md").read_text().split())
    n = linear._RECOMPUTE_KEPT
    assert f"the layer's last {n} calls" in text and f"more than {n} times" in text
