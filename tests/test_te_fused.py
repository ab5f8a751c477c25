"""Where TE's fused modules quantize: LayerNormLinear's norm output and LayerNormMLP's activation output go
straight from float32 to FP8 with delayed scaling, through bfloat16 with every other recipe (TE's
normalization.cpp / activation.cpp choose FULLY_FUSED only for the delayed-scaling quantizer; MXFP8's
kernels round to bfloat16 themselves).

The expectations are compositions of fp8emu's quantizers (fp8emu.scaling) and GEMM presets
(fp8emu.scaled_mm), written out here.  ``python tests/test_te_fused.py`` prints the table of
docs/guides/te.md (fused against unfused, per recipe), which a test below recomputes.
"""

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu  # noqa: E402
import fp8emu.torch.te as te  # noqa: E402
from fp8emu.scaling import DelayedScaling, quantize_tensorwise  # noqa: E402
from fp8emu.torch.te import recipe  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "te.md"


def bf16(a):
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _ln(x, g, b):
    """The norm in float32 from bfloat16 input and parameters (TE's kernel arithmetic, torch's reductions)."""
    t = torch.nn.functional.layer_norm(torch.from_numpy(bf16(x)), (x.shape[-1],), torch.from_numpy(bf16(g)),
                                       torch.from_numpy(bf16(b)), 1e-5)
    return t.numpy()


def _gelu(a):
    t = torch.from_numpy(np.asarray(a, np.float32))
    return (t * (0.5 + 0.5 * torch.tanh(t * (0.79788456 + 0.03567741 * t * t)))).numpy()


def _mm(a, b, bias, acc):
    """fp8emu.scaled_mm of two per-tensor ScaledTensors (A: M x K, B given as N x K), bf16 output."""
    return fp8emu.scaled_mm(a.codes, b.codes.T, a_format=a.fmt, b_format=b.fmt, scale_a=np.float32(a.scale_inv),
                            scale_b=np.float32(b.scale_inv), bias=bf16(bias), out_dtype="bfloat16",
                            accumulator=acc).astype(np.float32)


def _data(seed, m, k):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((m, k)) * 3 + 1).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("fused", [None, False])
def test_layernorm_linear_delayed_quantizes_the_float32_norm_output(fused):
    torch.manual_seed(0)
    mod = te.LayerNormLinear(128, 64)
    with torch.no_grad():
        for p in (mod.layer_norm_weight, mod.layer_norm_bias, mod.bias):
            p.normal_()
    g, b = (p.detach().numpy() for p in (mod.layer_norm_weight, mod.layer_norm_bias))
    w, bias = mod.weight.detach().numpy(), mod.bias.detach().numpy()
    dx, dw = DelayedScaling("e4m3fn", amax_history_len=8), DelayedScaling("e4m3fn", amax_history_len=8)
    rec = recipe.DelayedScaling(amax_history_len=8)
    for x in _data(1, 64, 128):
        with te.autocast(recipe=rec, gpu="h100"), torch.no_grad():
            got = mod(torch.from_numpy(x), fused=fused).numpy()
        ln = _ln(x, g, b)
        a = dx.quantize(ln if fused is None else bf16(ln))      # TE: fp8(norm * scale) from float32
        want = _mm(a, dw.quantize(w), bias, "hopper-fast")
        np.testing.assert_array_equal(got, want)


def test_about_one_code_in_thirty_differs_between_the_two_roundings():
    # bfloat16 keeps 4 more fraction bits than E4M3: one bf16 value in 16 is an E4M3 midpoint, and half of the
    # float32 values rounding to it lie on the side it does not round to (the guide's "one code in 30")
    x = _ln(_data(6, 256, 256)[0], np.ones(256, np.float32), np.zeros(256, np.float32)) * 16
    direct, twice = quantize_tensorwise(x, "e4m3fn", scale=1.0), quantize_tensorwise(bf16(x), "e4m3fn", scale=1.0)
    assert 1 / 40 < np.mean(direct.codes != twice.codes) < 1 / 25


def test_layernorm_linear_current_scaling_rounds_to_bf16_first():
    # FUSED_NORM_AMAX_FP8 writes the bf16 output and its amax, then quantizes: the unfused composition
    torch.manual_seed(0)
    mod = te.LayerNormLinear(128, 64)
    x = _data(2, 64, 128)[0]
    g, b = (p.detach().numpy() for p in (mod.layer_norm_weight, mod.layer_norm_bias))
    with te.autocast(recipe=recipe.Float8CurrentScaling(), gpu="h100"), torch.no_grad():
        got = mod(torch.from_numpy(x)).numpy()
    a = quantize_tensorwise(bf16(_ln(x, g, b)), "e4m3fn")
    want = _mm(a, quantize_tensorwise(mod.weight.detach().numpy(), "e4m3fn"), mod.bias.detach().numpy(),
               "hopper-fast")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fused", [None, False])
def test_layernorm_mlp_delayed_quantizes_the_float32_activation(fused):
    torch.manual_seed(0)
    mod = te.LayerNormMLP(128, 256)
    with torch.no_grad():
        mod.fc1_bias.normal_()
        mod.fc2_bias.normal_()
    p = {n: t.detach().numpy() for n, t in mod.named_parameters()}
    ds = {r: DelayedScaling("e4m3fn", amax_history_len=8) for r in ("x1", "w1", "x2", "w2")}
    for x in _data(3, 64, 128):
        with te.autocast(recipe=recipe.DelayedScaling(amax_history_len=8)), torch.no_grad():
            got = mod(torch.from_numpy(x), fused=fused).numpy()
        ln = _ln(x, p["layer_norm_weight"], p["layer_norm_bias"])
        fc1 = _mm(ds["x1"].quantize(ln if fused is None else bf16(ln)), ds["w1"].quantize(p["fc1_weight"]),
                  p["fc1_bias"], "hopper-fast")
        act = _gelu(fc1)
        want = _mm(ds["x2"].quantize(act if fused is None else bf16(act)), ds["w2"].quantize(p["fc2_weight"]),
                   p["fc2_bias"], "hopper-fast")
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rec, gpu", [(recipe.Float8CurrentScaling(), "h100"), (recipe.MXFP8BlockScaling(), "b200"),
                                      (recipe.Float8BlockScaling(), "h100"), (recipe.NVFP4BlockScaling(), "b200")],
                         ids=["current", "mxfp8", "block", "nvfp4"])
def test_other_recipes_quantize_as_the_unfused_composition(rec, gpu):
    # forward and backward: TE's kernels for these recipes round the norm / activation output (and MXFP8's
    # dactivation) to bf16 before the quantizer, exactly as an unfused composition
    outs = []
    for fused in (None, False):
        torch.manual_seed(0)
        mod = te.LayerNormMLP(128, 256, activation="gelu")
        x = torch.from_numpy(_data(4, 64, 128)[0]).requires_grad_()
        with te.autocast(recipe=rec, gpu=gpu):
            y = mod(x, fused=fused)
        y.backward(torch.ones_like(y))
        outs.append([y.detach(), x.grad, mod.fc1_weight.grad, mod.fc2_weight.grad])
    for a, b in zip(*outs):
        assert torch.equal(a, b)


def _pair_outputs(kind, rec, gpu, steps=3):
    """(fused, unfused) outputs and input gradients of the last of ``steps`` identical steps."""
    res = []
    for fused in (None, False):
        torch.manual_seed(0)
        mod = te.LayerNormLinear(256, 256) if kind == "LayerNormLinear" else te.LayerNormMLP(256, 1024)
        for x in _data(5, 256, 256)[:steps]:
            x = torch.from_numpy(x).requires_grad_()
            with te.autocast(recipe=rec, gpu=gpu):
                y = mod(x, fused=fused)
            y.backward(torch.from_numpy(bf16(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape))))
        res.append((y.detach().numpy(), x.grad.numpy()))
    return res


def _rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


MEASURED = [("delayed", "h100"), ("current", "h100"), ("block", "h100"), ("mxfp8", "b200"), ("nvfp4", "b200")]
_TE = {"delayed": recipe.DelayedScaling, "current": recipe.Float8CurrentScaling, "block": recipe.Float8BlockScaling,
       "mxfp8": recipe.MXFP8BlockScaling, "nvfp4": recipe.NVFP4BlockScaling}


def measure(only=None) -> list:
    """Rows (module, recipe, gpu, outputs differing, rel. difference of outputs, rel. difference of dgrad)."""
    rows = []
    for kind in ("LayerNormLinear", "LayerNormMLP"):
        for name, gpu in MEASURED:
            if only is not None and name not in only:
                continue
            (yf, gf), (yu, gu) = _pair_outputs(kind, _TE[name](), gpu)
            rows.append((kind, name, gpu, f"{np.mean(yf != yu):.2%}", f"{_rel(yf, yu):.2e}", f"{_rel(gf, gu):.2e}"))
    return rows


def table() -> str:
    head = "| module | recipe | gpu | outputs differing | rel. difference, output | rel. difference, input grad |"
    lines = [head, "|" + "---|" * 6]
    lines += ["| " + " | ".join(r) + " |" for r in measure()]
    return "\n".join(lines)


def _page_table():
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"<!-- fused-table -->\n(.*?)\n<!-- /fused-table -->", text, re.S)
    assert block, "docs/guides/te.md has no fused-table block"
    return block.group(1).strip()


def test_the_page_table_rows_of_delayed_scaling_are_this_measurement():
    rows = ["| " + " | ".join(r) + " |" for r in measure(only=("delayed",))]
    page = [line for line in _page_table().splitlines() if "| delayed |" in line]
    assert page == rows


@pytest.mark.exhaustive      # minutes on two cores (MXFP8 on b200 is the slow GEMM)
def test_the_page_table_is_this_measurement():
    assert _page_table() == table()


if __name__ == "__main__":
    print(table())
