"""An emulated model runs in one thread while another thread compiles something.

``torch.compiler.is_compiling()`` is one process-wide flag that Dynamo holds for a whole compile session.  The
emulated layer took it as "I am being traced" and called the compiled op, and the op's own eager call saw it again:
a thread running an emulated model, eagerly or through an already compiled graph, died with "RecursionError:
maximum recursion depth exceeded" whenever any other thread compiled anything.  The compile here is held open by a
backend that runs the other thread's call to its end before it returns; the expectation is the same call run alone.
"""

import threading

import pytest

torch = pytest.importorskip("torch")
from torch_models import small_mlp, train_step  # noqa: E402


def _model():
    return small_mlp("te-delayed", "h100")


def _step(model, x):
    return train_step(model, x)[:2]


def _while_compiling(call):
    """``call()`` run in another thread while this thread's compile session is open; its result or exception."""
    got = {}

    def other():
        try:
            got["result"] = call()
        except BaseException as exc:        # noqa: BLE001 - handed to the test
            got["error"] = exc

    def backend(gm, inputs):
        assert torch.compiler.is_compiling()
        t = threading.Thread(target=other)
        t.start()
        t.join(60)
        assert not t.is_alive()
        return gm.forward

    torch.compile(lambda a: torch.sin(a) + 1, backend=backend)(torch.randn(4))
    if "error" in got:
        raise got["error"]
    return got["result"]


@pytest.mark.parametrize("compiled", [False, True])
def test_a_model_runs_in_a_thread_while_another_compiles(compiled):
    x = torch.randn(16, 32)
    alone, model = _model(), _model()
    want = [_step(alone, x) for _ in range(2)]
    run = torch.compile(model, backend="aot_eager") if compiled else model
    got = [_step(run, x)]                                   # compiled (if so) before the other thread's compile
    got.append(_while_compiling(lambda: _step(run, x)))
    for (y, dx), (wy, wdx) in zip(got, want):
        assert torch.equal(y, wy) and torch.equal(dx, wdx)
    for (name, a), (_, b) in zip(model.state_dict().items(), alone.state_dict().items()):
        assert torch.equal(a, b), name


def test_without_grad_too():
    x = torch.randn(3, 32)                  # inference: any token count
    alone, model = _model(), _model()
    with torch.no_grad():
        want = alone(x)

    def call():
        with torch.no_grad():           # grad mode is per thread
            return model(x)

    assert torch.equal(_while_compiling(call), want)
