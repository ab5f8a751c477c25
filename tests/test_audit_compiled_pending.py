"""A compiled emulated layer keeps an eager call's graph only while a backward can still use it
(tests/AUDIT.md, "Third fresh audit of the CPU order, probes, compile and filters")."""

import gc

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _models():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    ft.emulate(model, "te-delayed", "h100")
    return model, torch.compile(model, backend="aot_eager", fullgraph=True)


def test_forwards_never_backpropagated_leave_nothing_pending():
    model, compiled = _models()
    x = torch.randn(16, 32)
    for _ in range(20):       # an evaluation loss with autograd on: each call's eager graph was kept for ever
        loss = compiled(x).square().mean()
        del loss
    gc.collect()
    assert [len(m.compiled_pending) for m in (model[0], model[2])] == [0, 0]


def test_a_pending_backward_still_runs_and_gives_the_eager_gradients():
    model, compiled = _models()
    x = torch.randn(16, 32)
    loss = compiled(x).square().mean()
    gc.collect()
    assert len(model[0].compiled_pending) == 1          # kept while the graph that needs it lives
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    assert len(model[0].compiled_pending) == 0
    eager, _ = _models()                                  # the same seed: the same weights and state
    eager(x).square().mean().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(got, eager.parameters()))
