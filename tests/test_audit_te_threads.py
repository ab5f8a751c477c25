"""One TE module called from several threads at once under delayed scaling (fourteenth audit, part A).

``QuantGemm.operand`` read delayed scaling's history and scale, quantized with them and wrote them back without
the lock ``EmulatedLinear`` takes (``gemms.STATE_LOCK``, twelfth audit): four threads sharing one ``te.Linear``
(each inside its own ``te.autocast``) kept 157 of 240 amax values, silently, and a thread could read
``scale_input`` before another had registered it ("AttributeError: 'QuantGemm' object has no attribute
'scale_input'").  Now every call's amax is recorded once and the state is made once.
"""

import collections

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402
# the threads' harness of the twelfth audit's layer test: a barrier start, every error reported, and as many
# thread switches as Python allows (a fixture, used by its name)
from test_audit_layer_threads import _run, switch_often  # noqa: E402, F401


@pytest.mark.parametrize("repeat", range(3))
def test_threads_sharing_a_delayed_module_keep_every_amax(switch_often, repeat):
    torch.manual_seed(repeat)
    layer = te.Linear(32, 32)
    xs = [torch.randn(16, 32) * (i + 1) for i in range(4)]

    def calls(i):
        with te.autocast(recipe=te.recipe.DelayedScaling()), torch.no_grad():
            for _ in range(60):
                layer(xs[i])
    _run(4, 1, calls)
    g = layer.fp8emu_gemm
    assert int(g.fp8emu_step) == 240
    # each call records its input's amax once (TE's history: 1024 slots, none rolled out): the amax of the input
    # in the h100 stack's activation dtype, bfloat16
    want = {float(x.to(torch.bfloat16).abs().max()): 60 for x in xs}
    got = collections.Counter(float(v) for v in g.amax_history_input if v != 0)
    assert got == want
    # the weight's amax, recorded once per call too
    assert collections.Counter(float(v) for v in g.amax_history_weight if v != 0) == {
        float(layer.weight.detach().abs().max()): 240}
