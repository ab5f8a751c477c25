"""``fp8emu.torch.autocast`` is per thread: a block in one thread does not switch the layer in another.

The module and the guide say the autocast state is a ContextVar, "so each thread or task has its own".  The
block's recipe and stack were put on the shared layer itself for the duration of each call, so a thread
running the model outside any block, while another ran it inside ``autocast(gpu="exact")``, computed with
the exact stack, silently (193 of 200 calls, two threads).  Here the interleaving is forced: the thread in
the block is held inside its layer call while the other thread runs a forward and a backward.  The
expectations are the same calls run alone, one thread, one after the other.
"""

import threading

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
from torch_models import small_mlp, train_step  # noqa: E402
from fp8emu.torch.linear import EmulatedLinear  # noqa: E402


def _model():
    return small_mlp("te-current", "h100")


_step = train_step


def _alone(block):
    model, x = _model(), torch.randn(32, 32, generator=torch.Generator().manual_seed(1))
    if block is None:
        return _step(model, x)
    with ft.autocast(**block):
        return _step(model, x)


@pytest.mark.parametrize("block", [{"gpu": "exact"}, {"recipe": "torchao-rowwise"}, {"recipe": "torchao-rowwise", "gpu": "b200"}])
def test_a_block_in_one_thread_leaves_another_threads_calls_alone(block, monkeypatch):
    plain, inside = _alone(None), _alone(block)
    assert not torch.equal(plain[0], inside[0])          # the block computes something else
    model, x = _model(), torch.randn(32, 32, generator=torch.Generator().manual_seed(1))
    entered, release = threading.Event(), threading.Event()
    forward = EmulatedLinear._forward

    def held(self, x):
        # the thread in the block waits inside its first layer call (its recipe / stack in force) for the
        # other thread's forward and backward
        if threading.current_thread().name == "in-block" and not entered.is_set():
            entered.set()
            assert release.wait(20)
        return forward(self, x)

    monkeypatch.setattr(EmulatedLinear, "_forward", held)
    got = {}

    def in_block():
        with ft.autocast(**block):
            got["inside"] = _step(model, x)

    t = threading.Thread(target=in_block, name="in-block")
    t.start()
    try:
        assert entered.wait(20)
        got["plain"] = _step(model, x)          # this thread: no block
    finally:
        release.set()
        t.join(20)
    # the parameters' gradients accumulate over the two steps: compare the outputs and input gradients
    for mine, ref in (("plain", plain), ("inside", inside)):
        assert torch.equal(got[mine][0], ref[0]), mine
        assert torch.equal(got[mine][1], ref[1]), mine


def test_the_layer_keeps_its_own_recipe_and_stack_after_a_block():
    model = _model()
    with ft.autocast(gpu="exact", recipe="torchao-rowwise"):
        model(torch.randn(16, 32))
    assert (model[0].recipe.name, model[0].stack.name) == ("te-current", "h100")


def test_a_pickled_layer_keeps_its_recipe_and_stack():
    import pickle
    model = _model()
    x = torch.randn(16, 32)
    back = pickle.loads(pickle.dumps(model))
    assert (back[0].recipe, back[0].stack, back[0].multiple) == (model[0].recipe, model[0].stack, model[0].multiple)
    with torch.no_grad():
        assert torch.equal(back(x), model(x))
