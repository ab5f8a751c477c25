"""One emulated layer called from several threads at once: every call takes its own step, no amax is lost.

The step counter (``fp8emu_step``, which seeds stochastic rounding) was read, then incremented, and delayed
scaling's history and scale were read, quantized with and written back, each without a lock: three threads
sharing one te-nvfp4 layer ran 180 calls of which 3 steps were taken twice (two calls, one stochastic-rounding
seed; three steps never run) and three threads sharing one te-delayed layer kept 150 of 180 amax values, silently.
Four threads calling one layer with new inputs raised a bare ``KeyError`` (or "dictionary changed size during
iteration") from the recompute cache's trimming.  Eagerly all three are now done under one lock
(``gemms.STATE_LOCK``).  A *compiled* layer's state flows through the
graph (the op returns it, the traced code copies it back), which no lock spans: concurrent compiled calls of one
layer still read one step several times (a strict xfail, recorded in tests/AUDIT.md, twelfth audit part B).
"""

import collections
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
from fp8emu.torch.gemms import take_step  # noqa: E402


@pytest.fixture
def switch_often():
    """Switch threads as often as Python allows, so that a read and its write are interleaved if they can be."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run(threads, calls, fn):
    barrier = threading.Barrier(threads)
    errors = []

    def work(i):
        try:
            barrier.wait()
            for _ in range(calls):
                fn(i)
        except Exception as exc:      # pragma: no cover - reported below
            errors.append(exc)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_take_step_gives_each_call_its_own_step(switch_often):
    counter = torch.zeros((), dtype=torch.int64)
    got = []
    _run(4, 2000, lambda i: got.append(take_step(counter, "test")))
    assert int(counter) == 8000
    assert sorted(got) == list(range(8000))


def _layer_steps(model):
    return [r["step"] for r in ft.diagnostics(model) if r["tensor"] == "input"]


def test_eager_calls_take_distinct_steps(switch_often):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, "te-nvfp4", "b200", diagnostics=True)
    x = torch.randn(16, 64)

    def call(i):
        with torch.no_grad():
            model(x)
    _run(4, 60, call)
    assert sorted(_layer_steps(model)) == list(range(240))


def test_eager_delayed_scaling_keeps_every_amax(switch_often):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-delayed", "h100")
    xs = [torch.randn(16, 32) * (i + 1) for i in range(4)]

    def call(i):
        with torch.no_grad():
            model(xs[i])
    _run(4, 60, call)
    hist = model[0].amax_history_input.numpy()
    assert int(model[0].fp8emu_step) == 240
    # each call records its input's amax once (TE's history: 1024 slots, so none rolled out): the amax of the
    # input in the h100 stack's activation dtype, bfloat16 (torch's cast)
    want = collections.Counter(float(x.to(torch.bfloat16).abs().max()) for x in xs)
    got = collections.Counter(float(v) for v in hist if v != 0)
    assert got == {k: 60 for k in want}


@pytest.mark.xfail(strict=True, reason="a compiled layer's state flows through the graph; concurrent compiled "
                                       "calls of one layer read one step several times (twelfth audit B, not fixed)")
def test_compiled_calls_take_distinct_steps(switch_often):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, "te-nvfp4", "b200", diagnostics=True)
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(16, 64)
    with torch.no_grad():
        compiled(x)

    def call(i):
        with torch.no_grad():
            compiled(x)
    _run(4, 30, call)
    assert sorted(_layer_steps(model)) == list(range(121))


class _SlowIter(dict):
    """The recompute cache, its first key handed out 1 ms after it is read, so that a thread trimming the cache is
    overtaken between the key and its ``pop`` if it can be."""

    def __iter__(self):
        first = next(super().__iter__())
        time.sleep(0.001)
        yield first


def test_eager_calls_with_new_inputs_keep_the_recompute_cache():
    # each call's input is new to the layer, so each call adds to the recompute cache and trims it to its last 16:
    # two threads trimming at once popped one key twice (a bare KeyError of the key, or "dictionary changed size
    # during iteration")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-current", "h100")
    model[0].recompute_states = _SlowIter()
    xs = [torch.randn(16, 32) for _ in range(4 * 40)]

    def call(i):
        with torch.no_grad():
            model(xs[i * 40 + int(model[0].fp8emu_step) % 40])
    _run(4, 40, call)
    assert int(model[0].fp8emu_step) == 160 and len(model[0].recompute_states) == 16
