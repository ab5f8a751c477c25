"""Emulated layers under activation checkpointing (``torch.utils.checkpoint``) train as without it.

The recompute in the backward ran each layer's forward a second time: the step counter (which seeds
stochastic rounding) advanced twice per step, delayed scaling recorded the amax twice and quantized the
recompute with the updated scale, so the recomputed activations (a ReLU's mask) and the gradients differed
from the same model without checkpointing.  A forward run inside a backward with a call's input replays that
call (its state, its ``fp8emu.torch.autocast`` block) and leaves the state as it was.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _pair(recipe, gpu, **kw):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    ft.emulate(base, recipe, gpu, **kw)
    return copy.deepcopy(base), copy.deepcopy(base)


def _same(m1, m2):
    grads = all(torch.equal(a.grad, b.grad) for a, b in zip(m1.parameters(), m2.parameters()))
    state = all(torch.equal(a, b) for (n, a), (_, b) in zip(m1.named_buffers(), m2.named_buffers())
                if not n.endswith("fp8emu_key"))
    return grads and state


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("recipe,gpu", [("te-delayed", "h100"), ("te-nvfp4", "b200"), ("te-current", "h100")])
def test_checkpointed_steps_give_the_gradients_and_state_of_plain_steps(recipe, gpu, reentrant):
    plain, ckpt = _pair(recipe, gpu, diagnostics=True)
    for _ in range(3):
        x = torch.randn(64, 64)
        for m in (plain, ckpt):
            m.zero_grad()
        plain(x).square().mean().backward()
        checkpoint(ckpt, x.requires_grad_(reentrant), use_reentrant=reentrant).square().mean().backward()
        assert _same(plain, ckpt)
    assert int(ckpt[0].fp8emu_step) == 3
    assert str(ft.diagnostics(plain)) == str(ft.diagnostics(ckpt))      # NaN fields compare as text


def test_the_recompute_runs_in_the_autocast_block_of_its_forward():
    plain, ckpt = _pair("te-current", "h100", autocast_only=True)
    x = torch.randn(64, 64)
    with ft.autocast(gpu="exact"):
        y1 = plain(x)
        y2 = checkpoint(ckpt, x, use_reentrant=False)
    (y1.square().mean()).backward()          # the backward after the block, as TE's modules allow
    (y2.square().mean()).backward()
    assert torch.equal(y1, y2) and _same(plain, ckpt)
