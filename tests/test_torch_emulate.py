"""fp8emu.torch: every pass of an emulated linear layer equals an independent composition of the
recipe's quantizer and the named GEMM preset, called by hand here; delayed scaling's state over a
worked sequence; determinism; diagnostics; bad input."""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")

from fp8emu.gemm import block_scaled_mm, scaled_mm  # noqa: E402
from fp8emu.parallel import set_threads  # noqa: E402
from fp8emu.scaling import (  # noqa: E402
    NVFP4Quantizer, quantize_axiswise, quantize_blockwise, quantize_mx, quantize_nvfp4_te,
    quantize_tensorwise,
)

BF16 = ml_dtypes.bfloat16
# The GEMM preset of each pass, per stack, written out from the stacks' documentation:
# Hopper: fast accumulation for fprop, split accumulator for dgrad and wgrad (TE module/base.py,
# torchao's Float8GemmConfig defaults); block-scaled FP8 always split.
PER_TENSOR = {
    "h100": {"fprop": "hopper-fast", "dgrad": "hopper", "wgrad": "hopper"},
    "h100-fast": {"fprop": "hopper-fast", "dgrad": "hopper-fast", "wgrad": "hopper-fast"},
    "b200": dict.fromkeys(("fprop", "dgrad", "wgrad"), "blackwell-tcgen05-f8f6f4"),
    "cpu": dict.fromkeys(("fprop", "dgrad", "wgrad"), "fp32"),
    "exact": dict.fromkeys(("fprop", "dgrad", "wgrad"), "exact"),
}
BLOCK_FP8 = {"h100": "hopper", "cpu": "fp32", "exact": "exact"}
MX = {"b200": "blackwell-tcgen05-mxf8f6f4", "cpu": "fp32", "exact": "exact"}
NVFP4 = {"b200": "blackwell-tcgen05-mxf4nvf4", "cpu": "fp32", "exact": "exact"}
DTYPE = {"h100": "bfloat16", "h100-fast": "bfloat16", "b200": "bfloat16", "cpu": "float32", "exact": "float32"}


def _q_tensor(fmt, scale=None):
    def q(arr, k_axis, role, pass_):
        st = quantize_tensorwise(arr, fmt[role], scale=scale)
        return st.codes, st.fmt, st.scale_inv
    return q


def _torchao(arr, fmt, axis, pow2):
    a = np.asarray(arr, np.float32)
    amax = np.abs(a).max() if axis is None else np.abs(a).max(axis=axis, keepdims=True)
    s = np.float32(448.0) / np.maximum(amax.astype(np.float64), 1e-12)   # torchao: float64, then float32
    s = np.asarray(s, np.float32)
    if pow2:
        s = np.ldexp(np.float32(1), np.frexp(s)[1] - 1).astype(np.float32)   # round down to 2**k
    st = quantize_tensorwise(a, fmt, scale=s[()]) if axis is None else quantize_axiswise(a, fmt, axis=axis, scale=s)
    return st.codes, st.fmt, st.scale_inv


def hand(recipe, gpu, x, w, b, dy, seed=0):
    """(y, dx, dw) composed by hand from fp8emu.scaling and fp8emu.gemm."""
    dt = DTYPE[gpu]
    xs = x.astype(BF16) if dt == "bfloat16" else x
    dys = dy.astype(BF16) if dt == "bfloat16" else dy
    bias = np.asarray(b.astype(BF16) if dt == "bfloat16" else b, np.float32)

    def rng(p):
        return np.random.default_rng([seed, 0, 0, {"fprop": 0, "dgrad": 1, "wgrad": 2}[p]])

    if recipe in ("te-current", "te-delayed", "torchao-tensorwise"):
        fmt = {"input": "e4m3fn", "weight": "e4m3fn", "grad_output": "e5m2"}
        acc = PER_TENSOR[gpu]
        if recipe == "torchao-tensorwise":
            qx, qw, qg = _torchao(xs, "e4m3fn", None, False), _torchao(w, "e4m3fn", None, False), \
                _torchao(dys, "e5m2", None, False)
        else:
            sc = 1.0 if recipe == "te-delayed" else None     # delayed: the first step's scale is 1
            qx, qw, qg = (quantize_tensorwise(xs, "e4m3fn", scale=sc), quantize_tensorwise(w, "e4m3fn", scale=sc),
                          quantize_tensorwise(dys, "e5m2", scale=sc))
            qx, qw, qg = [(q.codes, q.fmt, q.scale_inv) for q in (qx, qw, qg)]
        y = scaled_mm(qx[0], qw[0].T, a_format=qx[1], b_format=qw[1], scale_a=qx[2], scale_b=qw[2], bias=bias,
                      out_dtype=dt, accumulator=acc["fprop"])
        dx = scaled_mm(qg[0], qw[0], a_format=qg[1], b_format=qw[1], scale_a=qg[2], scale_b=qw[2], out_dtype=dt,
                       accumulator=acc["dgrad"])
        dw = scaled_mm(qg[0].T, qx[0], a_format=qg[1], b_format=qx[1], scale_a=qg[2], scale_b=qx[2],
                       accumulator=acc["wgrad"])
        return y, dx, dw
    if recipe.startswith("torchao-rowwise"):
        acc = PER_TENSOR[gpu]
        ax = _torchao(xs, "e4m3fn", 1, recipe == "torchao-rowwise")
        bw = _torchao(w.T, "e4m3fn", 0, recipe == "torchao-rowwise")
        y = scaled_mm(ax[0], bw[0], a_format="e4m3fn", b_format="e4m3fn", scale_a=ax[2], scale_b=bw[2], bias=bias,
                      out_dtype=dt, accumulator=acc["fprop"])
        ag = _torchao(dys, "e4m3fn", 1, recipe == "torchao-rowwise")
        if recipe == "torchao-rowwise":
            bw2 = _torchao(w, "e4m3fn", 0, True)
        else:
            bw2 = _torchao(w, "e4m3fn", None, False)       # gw_hp: the weight for grad_input is tensorwise
        dx = scaled_mm(ag[0], bw2[0], a_format="e4m3fn", b_format="e4m3fn", scale_a=ag[2], scale_b=bw2[2],
                       out_dtype=dt, accumulator=acc["dgrad"])
        if recipe == "torchao-rowwise":
            ag2, bx = _torchao(dys.T, "e4m3fn", 1, True), _torchao(xs, "e4m3fn", 0, True)
            dw = scaled_mm(ag2[0], bx[0], a_format="e4m3fn", b_format="e4m3fn", scale_a=ag2[2], scale_b=bx[2],
                           accumulator=acc["wgrad"])
        else:
            dw = (np.asarray(dys, np.float64).T @ np.asarray(xs, np.float64)).astype(np.float32)
        return y, dx, dw
    if recipe in ("te-block", "deepseek-v3"):
        acc, pow2 = BLOCK_FP8[gpu], recipe == "te-block"

        def q(a, block):
            st = quantize_blockwise(a, "e4m3fn", block=block, pow2=pow2)
            return st.codes, st.scale_inv
        cx, sx = q(xs, (1, 128))
        cw, sw = q(w, (128, 128))
        y = scaled_mm(cx, cw.T, a_format="e4m3fn", b_format="e4m3fn", scale_a=sx, scale_b=sw.T, bias=bias,
                      out_dtype=dt, accumulator=acc)
        cg, sg = q(dys, (1, 128))
        dx = scaled_mm(cg, cw, a_format="e4m3fn", b_format="e4m3fn", scale_a=sg, scale_b=sw, out_dtype=dt,
                       accumulator=acc)
        cgc, sgc = q(dys, (128, 1))
        cxc, sxc = q(xs, (128, 1))
        dw = scaled_mm(cgc.T, cxc, a_format="e4m3fn", b_format="e4m3fn", scale_a=sgc.T, scale_b=sxc,
                       accumulator=acc)
        return y, dx, dw
    if recipe == "te-mxfp8":
        acc = MX[gpu]

        def q(a, axis):
            return quantize_mx(a, "e4m3fn", axis=axis, scale_rule="rceil")
        y = block_scaled_mm(q(xs, 1), q(w.T, 0), bias=bias, out_dtype=dt, accumulator=acc)
        dx = block_scaled_mm(q(dys, 1), q(w, 0), out_dtype=dt, accumulator=acc)
        dw = block_scaled_mm(q(dys.T, 1), q(xs, 0), accumulator=acc)
        return y, dx, dw
    assert recipe.startswith("te-nvfp4")
    acc = NVFP4[gpu]
    rht, sr, two_d = recipe != "te-nvfp4-no-rht", recipe != "te-nvfp4-no-sr", recipe != "te-nvfp4-no-2d"
    wq = NVFP4Quantizer(with_2d_quantization=two_d)
    y = block_scaled_mm(quantize_nvfp4_te(xs, NVFP4Quantizer(), axis=1), quantize_nvfp4_te(w.T, wq, axis=0),
                        bias=bias, out_dtype=dt, accumulator=acc)
    g = quantize_nvfp4_te(dys, NVFP4Quantizer(stochastic_rounding=sr), axis=1, rng=rng("dgrad") if sr else None)
    dx = block_scaled_mm(g, quantize_nvfp4_te(w, wq, axis=0), out_dtype=dt, accumulator=acc)
    gt = quantize_nvfp4_te(dys.T, NVFP4Quantizer(stochastic_rounding=sr, with_rht=rht), axis=1,
                           rng=rng("wgrad") if sr else None)
    xt = quantize_nvfp4_te(xs, NVFP4Quantizer(with_rht=rht), axis=0)
    dw = block_scaled_mm(gt, xt, accumulator=acc)
    return y, dx, dw


def _bits(a):
    a = np.asarray(a, np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


def _data(M=256, K=256, N=128, seed=1):   # K > 128: split and fast accumulation differ
    r = np.random.default_rng(seed)
    x = (r.standard_normal((M, K)) * r.lognormal(0, 1, (M, 1))).astype(np.float32)
    w = (r.standard_normal((N, K)) * 0.1).astype(np.float32)
    b = (r.standard_normal(N) * 0.1).astype(np.float32)
    dy = (r.standard_normal((M, N)) * 1e-3).astype(np.float32)
    return x, w, b, dy


def _run(recipe, gpu, x, w, b, dy, **kw):
    lin = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
        lin.bias.copy_(torch.from_numpy(b))
    model = torch.nn.Sequential(lin)
    ft.emulate(model, recipe, gpu, **kw)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    y = model(xt)
    y.backward(torch.from_numpy(dy))
    return model, y.detach().numpy(), xt.grad.numpy(), lin.weight.grad.numpy()


COMBOS = []
for _r in ft.recipe_names():
    for _g in ft.stack_names():
        try:
            ft.swap.check_combination(ft.get_recipe(_r), ft.get_stack(_g))
            COMBOS.append((_r, _g))
        except ValueError:
            pass


@pytest.mark.parametrize("recipe,gpu", COMBOS)
def test_every_pass_equals_the_hand_composition(recipe, gpu):
    x, w, b, dy = _data()
    _, y, dx, dw = _run(recipe, gpu, x, w, b, dy)
    ey, edx, edw = hand(recipe, gpu, x, w, b, dy)
    for got, exp, what in ((y, ey, "fprop"), (dx, edx, "dgrad"), (dw, edw, "wgrad")):
        assert np.array_equal(_bits(got), _bits(np.asarray(exp, np.float32))), f"{recipe} {gpu} {what}"


def test_the_combinations_cover_every_recipe_on_hopper_or_blackwell():
    names = set(ft.recipe_names())
    assert {r for r, g in COMBOS if g in ("h100", "b200")} == names
    assert len(COMBOS) == 46      # 60 pairs less 14 refused: block FP8 off h100-fast/b200, MX/NVFP4 off Hopper
    with pytest.raises(ValueError, match="^recipe 'te-nvfp4' on gpu 'h100': NVFP4 needs Blackwell"):
        ft.emulate(torch.nn.Sequential(torch.nn.Linear(64, 64)), "te-nvfp4", "h100")
