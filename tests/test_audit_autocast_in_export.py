"""``torch.export`` of a model that enters ``fp8emu.torch.autocast`` (fifteenth audit, part A).

Non-strict ``torch.export`` (torch's default) runs the forward's Python on fake tensors and records the ops: an
``autocast`` block entered in the forward (or around the export call) is Python state the program does not hold.
The exported program then ran the layers' own recipe where the module ran the block's: with ``enabled=False`` the
module gave torch's ``F.linear`` and the program the FP8 layer's output, silently.  Now the export is refused with the
way out (export outside the block, enter it around the program's call, where the layers read it), which gives the
module's bits; strict export names the cause as ``torch.compile(fullgraph=True)`` does.  The reference for
``enabled=False`` is ``F.linear`` itself.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402

_REFUSED = (r"^layer 'lin': torch.export cannot record an fp8emu.torch.autocast block \(its state is Python's, not "
            r"the graph's\), so the exported program would run the layer without it; export outside the block and "
            r"enter it around the exported program's call \(ep.module\(\)\(x\)\): the layers read it when they run$")

_BLOCKS = {"off": lambda: ft.autocast(enabled=False), "exact": lambda: ft.autocast(gpu="exact")}


class _Blocked(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)
        self.block = block

    def forward(self, x):
        with _BLOCKS[self.block]():
            return self.lin(x)


class _Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x):
        return self.lin(x)


def _emulated(model):
    torch.manual_seed(0)
    model.lin.reset_parameters()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100")
    return model


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("block", list(_BLOCKS))
def test_a_block_in_the_forward_is_refused_not_dropped(block):
    with pytest.raises(RuntimeError, match=_REFUSED):
        torch.export.export(_emulated(_Blocked(block)), (torch.randn(16, 32),), strict=False)


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_block_around_the_export_call_is_refused_too():
    model = _emulated(_Plain())
    with ft.autocast(enabled=False), pytest.raises(RuntimeError, match=_REFUSED):
        torch.export.export(model, (torch.randn(16, 32),), strict=False)


@pytest.mark.usefixtures("fresh_dynamo")
def test_strict_export_names_the_cause():
    with pytest.raises(Exception, match=r"reason: fp8emu.torch.autocast keeps its state in a contextvars.ContextVar, "
                                        r".*\(torch.export: around the exported program's call\)"):
        torch.export.export(_emulated(_Blocked("off")), (torch.randn(16, 32),), strict=True)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("block", list(_BLOCKS))
def test_the_way_out_gives_the_modules_bits(block):
    model, blocked = _emulated(_Plain()), _emulated(_Blocked(block))
    x = torch.randn(16, 32)
    ep = torch.export.export(model, (x,))
    with torch.no_grad():
        want = blocked(x)
        with _BLOCKS[block]():
            got = ep.module()(x)
        assert torch.equal(got, want)
        if block == "off":
            assert torch.equal(got, torch.nn.functional.linear(x, model.lin.weight, model.lin.bias))
        assert torch.equal(ep.module()(x), model(x))       # outside the block: the FP8 layer, as before
