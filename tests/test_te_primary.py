"""FP8 primary weights (TE's quantized_model_init / fp8_model_init, Megatron-LM's --fp8-param-gather): the
weight's quantized copy is made once per optimizer step from the float32 master weight, instead of once per
forward.  Expected: no difference for recipes whose weight scale is the weight's own (current scaling, block,
MXFP8, NVFP4); a difference for delayed scaling where a step runs several forwards (micro-batches), since a
per-forward weight is re-quantized with a scale its own history has moved since.

Expectations: the same training run without primary weights (per-forward quantization), and
fp8emu.scaling's quantizers for the dequantized copy.  ``python tests/test_te_primary.py`` prints the table of
docs/guides/te.md, which a test recomputes.
"""

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch.te as te  # noqa: E402
from fp8emu.scaling import quantize_mx, quantize_tensorwise  # noqa: E402
from fp8emu.torch.te import recipe  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "te.md"
RECIPES = {"delayed": (recipe.DelayedScaling(), "h100"), "current": (recipe.Float8CurrentScaling(), "h100"),
           "block": (recipe.Float8BlockScaling(), "h100"), "mxfp8": (recipe.MXFP8BlockScaling(), "b200"),
           "nvfp4": (recipe.NVFP4BlockScaling(), "b200")}


def train(name, primary, *, steps=5, micro=4, seed=0):
    """A LayerNormMLP trained with SGD, ``micro`` micro-batches per step; returns (losses, final fc1 weight)."""
    rec, gpu = RECIPES[name]
    torch.manual_seed(seed)
    if primary:
        with te.quantized_model_init(recipe=rec, gpu=gpu):
            model = te.LayerNormMLP(64, 256)
    else:
        model = te.LayerNormMLP(64, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        for _ in range(micro):
            x = torch.randn(64, 64, generator=gen)
            target = torch.randn(64, 64, generator=gen)
            with te.autocast(recipe=rec, gpu=gpu):
                y = model(x)
            loss = (y - target).pow(2).mean() / micro
            loss.backward()
            losses.append(float(loss.detach()))
        opt.step()
    return np.array(losses), model.fc1_weight.detach().clone()


@pytest.mark.parametrize("name", ["current", "mxfp8"])
def test_primary_weights_change_nothing_when_the_scale_is_the_weights_own(name):
    la, wa = train(name, True, steps=3, micro=2)
    lb, wb = train(name, False, steps=3, micro=2)
    np.testing.assert_array_equal(la, lb)
    assert torch.equal(wa, wb)


def test_delayed_primary_weights_equal_per_forward_with_one_forward_per_step():
    # the copy made after step t uses the scale in force, records amax(w_t) and updates: what the forward of
    # step t does to a per-forward weight (TE's cast_master_weights_to_fp8 for delayed scaling)
    la, wa = train("delayed", True, steps=4, micro=1)
    lb, wb = train("delayed", False, steps=4, micro=1)
    np.testing.assert_array_equal(la, lb)
    assert torch.equal(wa, wb)


def test_delayed_primary_weights_differ_with_micro_batches():
    la, _ = train("delayed", True, steps=4, micro=4)
    lb, _ = train("delayed", False, steps=4, micro=4)
    assert not np.array_equal(la, lb)
    # the first micro-batch agrees (both quantize with scale 1); from the second, the per-forward weight is
    # re-quantized with the scale its first amax gave, the primary copy keeps the scale it was made with
    assert la[0] == lb[0] and la[1] != lb[1]


def test_the_copy_is_refreshed_after_each_optimizer_step():
    with te.quantized_model_init(recipe=recipe.Float8CurrentScaling()):
        lin = te.Linear(64, 64)
    x = torch.randn(16, 64)
    with te.autocast(recipe=recipe.Float8CurrentScaling()):
        before = lin(x)
        with torch.no_grad():
            lin.weight.mul_(3)          # an optimizer step: in place, the version changes
        after = lin(x)
    fresh = te.Linear(64, 64)
    with torch.no_grad():
        fresh.weight.copy_(lin.weight)
        fresh.bias.copy_(lin.bias)
    with te.autocast(recipe=recipe.Float8CurrentScaling()):
        assert torch.equal(after, fresh(x))
    assert not torch.equal(before, after)


@pytest.mark.parametrize("rec, gpu, dequant", [
    (recipe.Float8CurrentScaling(), "h100", lambda w: quantize_tensorwise(w, "e4m3fn").dequantize()),
    (recipe.MXFP8BlockScaling(), "b200",
     lambda w: quantize_mx(w.T, "e4m3fn", axis=0, scale_rule="rceil").dequantize().T),
], ids=["current", "mxfp8"])
@pytest.mark.parametrize("out", [64, 300])       # 300: a per-tensor scale stands for more than a 128-wide block
def test_high_precision_forward_uses_the_quantized_copy(rec, gpu, dequant, out):
    # outside autocast TE's FP8 parameter is what the layer has: its dequantized values, not the master
    with te.quantized_model_init(recipe=rec, gpu=gpu):
        lin = te.Linear(64, out, bias=False)
    x = torch.randn(32, 64, requires_grad=True)
    y = lin(x)
    want = torch.from_numpy(dequant(lin.weight.detach().numpy()))
    assert torch.equal(y, x @ want.T)
    y.sum().backward()
    assert lin.weight.grad is not None                     # the gradient reaches the master weight


def test_autocast_with_another_recipe_is_refused_by_name():
    with te.quantized_model_init(recipe=recipe.Float8CurrentScaling()):
        lin = te.Linear(64, 64)
    with te.autocast(recipe=recipe.DelayedScaling()):
        with pytest.raises(ValueError, match="'te-current'.*'te-delayed'"):
            lin(torch.randn(16, 64))


def measure() -> list:
    rows = []
    for name, (_, gpu) in RECIPES.items():
        for micro in (1, 4):
            la, wa = train(name, True, micro=micro)
            lb, wb = train(name, False, micro=micro)
            rel = float(torch.linalg.norm(wa.double() - wb.double()) / torch.linalg.norm(wb.double()))
            rows.append((name, gpu, str(micro), f"{np.mean(la != lb):.0%}", f"{np.max(np.abs(la - lb)):.2e}",
                         f"{rel:.2e}"))
    return rows


def table() -> str:
    lines = ["| recipe | gpu | micro-batches per step | losses differing | max loss difference | "
             "rel. difference of fc1 weight after 5 steps |", "|" + "---|" * 6]
    lines += ["| " + " | ".join(r) + " |" for r in measure()]
    return "\n".join(lines)


@pytest.mark.exhaustive      # about a minute on two cores
def test_the_page_table_is_this_measurement():
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"<!-- primary-table -->\n(.*?)\n<!-- /primary-table -->", text, re.S)
    assert block, "docs/guides/te.md has no primary-table block"
    assert block.group(1).strip() == table()


if __name__ == "__main__":
    print(table())


@pytest.mark.parametrize("out", [64, 300])
def test_a_block_scaled_primary_weight_outside_autocast_is_its_e4m3_values(out):
    """Float8BlockScaling's weight: 128 x 128 blocks, one scale each.  Outside autocast the layer computes with the
    dequantized copy: every value within E4M3's half-ulp (2**-4 relative) of the master weight, the zeros zero, and
    the output x @ D^T in float32.  A 300-row weight has a last block of 44 rows."""
    with te.quantized_model_init(recipe=recipe.Float8BlockScaling(), gpu="h100"):
        lin = te.Linear(64, out, bias=False)
    w = lin.weight.detach().clone()
    with torch.no_grad():
        d = lin(torch.eye(64)).T            # the identity's rows pick the weight the layer computes with
    assert d.shape == w.shape and not torch.equal(d, w)
    assert torch.all((d - w).abs() <= 2.0 ** -4 * w.abs() + 2.0 ** -20)


def test_the_gemm_state_module_converts_as_a_module_does():
    """``Module.to`` returns what ``_apply`` returns: the module itself (the GEMM state keeps its float32 state)."""
    g = te.Linear(16, 16).fp8emu_gemm
    assert g.to(torch.float64) is g and g.float() is g
