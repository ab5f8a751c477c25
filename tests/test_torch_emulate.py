"""fp8emu.torch: every pass of an emulated linear layer equals an independent composition of the
recipe's quantizer and the named GEMM preset, called by hand here; delayed scaling's state over a
worked sequence; determinism; diagnostics; bad input."""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")

from fp8emu.codec import decode  # noqa: E402
from fp8emu.gemm import block_scaled_mm, scaled_mm  # noqa: E402
from fp8emu.gemm.torch_cpu import sgemm  # noqa: E402
from fp8emu.parallel import set_threads  # noqa: E402
from fp8emu.scaling import (  # noqa: E402
    NVFP4Quantizer, quantize_axiswise, quantize_blockwise, quantize_mx, quantize_nvfp4_te,
    quantize_tensorwise,
)
from fp8emu.training import STACKS  # noqa: E402

BF16 = ml_dtypes.bfloat16
# The GEMM preset of each pass, per stack, written out from the stacks' documentation:
# Hopper: fast accumulation for fprop, split accumulator for dgrad and wgrad (TE module/base.py,
# torchao's Float8GemmConfig defaults); block-scaled FP8 always split.
PER_TENSOR = {
    "h100": {"fprop": "hopper-fast", "dgrad": "hopper", "wgrad": "hopper"},
    "h100-fast": {"fprop": "hopper-fast", "dgrad": "hopper-fast", "wgrad": "hopper-fast"},
    "b200": dict.fromkeys(("fprop", "dgrad", "wgrad"), "blackwell-tcgen05-f8f6f4"),
    "cpu": dict.fromkeys(("fprop", "dgrad", "wgrad"), "torch-cpu"),       # resolved by _cpu_path below
    "exact": dict.fromkeys(("fprop", "dgrad", "wgrad"), "exact"),
}
BLOCK_FP8 = {"h100": "hopper", "cpu": "fp32", "exact": "exact"}
MX = {"b200": "blackwell-tcgen05-mxf8f6f4", "cpu": "fp32", "exact": "exact"}
NVFP4 = {"b200": "blackwell-tcgen05-mxf4nvf4", "cpu": "fp32", "exact": "exact"}
DTYPE = {"h100": "bfloat16", "h100-fast": "bfloat16", "b200": "bfloat16", "cpu": "float32", "exact": "float32"}


def _cpu_path(fa, fb, tensorwise):
    """The path torch's CPU _scaled_mm takes (aten/src/ATen/native/Blas.cpp, written out here): oneDNN
    when mkldnn is on, both scales are tensor-wise and the CPU has AMX-INT8 (mixed FP8 dtypes also need
    AMX-FP16); the emulated path otherwise."""
    flags = open("/proc/cpuinfo").read().split()
    onednn = (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled and tensorwise
              and "amx_int8" in flags and (fa == fb or "amx_fp16" in flags))
    return "torch-cpu-onednn" if onednn else "torch-cpu-emulated"


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
    return st.codes, st.fmt, st.scale_inv, s[()]


def _ao_mm(qa, qb, bias=None):
    """torchao Float8Linear(emulate=True)'s GEMM written out: torch.mm(a / sa, b / sb), float32 inputs."""
    x = (decode(qa[0], qa[1]).astype(np.float32) / qa[3]).astype(np.float32)
    y = (decode(qb[0], qb[1]).astype(np.float32) / qb[3]).astype(np.float32)
    v = sgemm(x, y)
    return v if bias is None else (v + bias.astype(np.float32)).astype(np.float32)


def hand(recipe, gpu, x, w, b, dy, seed=0):
    """(y, dx, dw) composed by hand from fp8emu.scaling and fp8emu.gemm."""
    dt = DTYPE[gpu]
    xs = x.astype(BF16) if dt == "bfloat16" else x
    dys = dy.astype(BF16) if dt == "bfloat16" else dy
    bias = np.asarray(b.astype(BF16) if dt == "bfloat16" else b, np.float32)

    def rng(p):
        return np.random.default_rng([seed, 0, 0, {"fprop": 0, "dgrad": 1, "wgrad": 2}[p]])

    if recipe.startswith("torchao") and gpu == "cpu":       # torchao's own emulated GEMM
        gran, pow2 = recipe[len("torchao-"):], recipe != "torchao-tensorwise"
        go = "e5m2" if gran == "tensorwise" else "e4m3fn"
        ax = None if gran == "tensorwise" else 1
        qx, qw = _torchao(xs, "e4m3fn", ax, pow2), _torchao(w.T, "e4m3fn", None if ax is None else 0, pow2)
        qg = _torchao(dys, go, ax, pow2)
        qw2 = _torchao(w, "e4m3fn", None if gran != "rowwise" else 0, pow2)
        y = _ao_mm(qx, qw, bias)
        dx = _ao_mm(qg, qw2)
        if gran == "rowwise-gw-hp":
            dw = sgemm(np.asarray(dys, np.float32).T, np.asarray(xs, np.float32))
        else:
            dw = _ao_mm(_torchao(dys.T, go, ax, pow2), _torchao(xs, "e4m3fn", None if ax is None else 0, pow2))
        return y, dx, dw
    if recipe in ("te-current", "te-delayed", "torchao-tensorwise"):
        fmt = {"input": "e4m3fn", "weight": "e4m3fn", "grad_output": "e5m2"}
        acc = PER_TENSOR[gpu]
        if gpu == "cpu":
            acc = {"fprop": _cpu_path("e4m3fn", "e4m3fn", True), "dgrad": _cpu_path("e5m2", "e4m3fn", True),
                   "wgrad": _cpu_path("e5m2", "e4m3fn", True)}
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
        ax = _torchao(xs, "e4m3fn", 1, True)       # both rowwise recipes: power-of-two scales
        bw = _torchao(w.T, "e4m3fn", 0, True)
        y = scaled_mm(ax[0], bw[0], a_format="e4m3fn", b_format="e4m3fn", scale_a=ax[2], scale_b=bw[2], bias=bias,
                      out_dtype=dt, accumulator=acc["fprop"])
        ag = _torchao(dys, "e4m3fn", 1, True)
        if recipe == "torchao-rowwise":
            bw2 = _torchao(w, "e4m3fn", 0, True)
        else:
            bw2 = _torchao(w, "e4m3fn", None, True)        # gw_hp: the weight for grad_input is tensorwise
        dx = scaled_mm(ag[0], bw2[0], a_format="e4m3fn", b_format="e4m3fn", scale_a=ag[2], scale_b=bw2[2],
                       out_dtype=dt, accumulator=acc["dgrad"])
        if recipe == "torchao-rowwise":
            ag2, bx = _torchao(dys.T, "e4m3fn", 1, True), _torchao(xs, "e4m3fn", 0, True)
            dw = scaled_mm(ag2[0], bx[0], a_format="e4m3fn", b_format="e4m3fn", scale_a=ag2[2], scale_b=bx[2],
                           accumulator=acc["wgrad"])
        else:
            dw = (np.asarray(dys, np.float64).T @ np.asarray(xs, np.float64)).astype(np.float32)
        return y, dx, dw
    if recipe in ("te-block", "deepseek-v3") and gpu == "b200":
        return _b200_block(recipe, xs, w, dys, bias, dt)
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


def _deepgemm_sf(amax):
    """DeepGEMM's sm_100 UE8M0 scale written out: the power of two at or above
    fl32(max(amax, 1e-4) / 448) (deep_gemm/utils/math.py, ceil_to_ue8m0), from math.frexp."""
    v = float(np.float32(max(float(amax), float(np.float32(1e-4)))) / np.float32(448))
    m, e = __import__("math").frexp(v)
    return 2.0 ** (e - 1) if m == 0.5 else 2.0 ** e


def _b200_block(recipe, xs, w, dys, bias, dt):
    """1x128 / 128x128 block FP8 on Blackwell, as TE's MXFP8 conversion and DeepGEMM's sm_100 kernels
    run it: the recipe's codes, each block's power-of-two scale as its E8M0 code in every 32-element
    slot along K, through the kind::mxf8f6f4 preset."""
    def q(a, block):
        a32 = np.asarray(a, np.float32)
        if recipe == "te-block":
            st = quantize_blockwise(a, "e4m3fn", block=block, pow2=True)
        else:
            nb = (-(-a32.shape[0] // block[0]), -(-a32.shape[1] // block[1]))
            sc = np.empty(nb, np.float32)
            for i in range(nb[0]):
                for j in range(nb[1]):
                    blk = a32[i * block[0]:(i + 1) * block[0], j * block[1]:(j + 1) * block[1]]
                    sc[i, j] = 1.0 / _deepgemm_sf(np.abs(blk).max())
            st = quantize_blockwise(a, "e4m3fn", block=block, scale=sc)
        full = np.repeat(np.repeat(np.asarray(st.scale_inv, np.float64), block[0], 0), block[1], 1)
        full = full[:a32.shape[0], :a32.shape[1]]
        m, e = np.frexp(full)
        assert np.all(m == 0.5), "block scales must be powers of two"
        return st.codes, (e - 1 + 127).astype(np.uint8)     # per-element E8M0 code of its block's scale

    def mm(qa, qb, **kw):   # qa: (M, K) codes and codes map, K along axis 1; qb: (K, N), K along axis 0
        return block_scaled_mm(qa[0], qb[0], a_format="e4m3fn", b_format="e4m3fn", a_scales=qa[1][:, ::32],
                               b_scales=qb[1][::32, :], accumulator="blackwell-tcgen05-mxf8f6f4", **kw)

    def t(qa):
        return qa[0].T, qa[1].T
    qw = q(w, (128, 128))
    y = mm(q(xs, (1, 128)), t(qw), bias=bias, out_dtype=dt)
    dx = mm(q(dys, (1, 128)), qw, out_dtype=dt)
    dw = mm(t(q(dys, (128, 1))), q(xs, (128, 1)))
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
    assert len(COMBOS) == 48      # 60 pairs less 12 refused: block FP8 off h100-fast, MX/NVFP4 off Hopper
    assert {("te-block", "b200"), ("deepseek-v3", "b200")} <= set(COMBOS)
    with pytest.raises(ValueError, match="^recipe 'te-nvfp4' on gpu 'h100': NVFP4 needs Blackwell"):
        ft.emulate(torch.nn.Sequential(torch.nn.Linear(64, 64)), "te-nvfp4", "h100")


# ----------------------------------------------------------------------------- delayed scaling's state
def _te_delayed_reference(amaxes, length):
    """TE's documented DelayedScaling update, step by step: quantize with the scale in force, put
    amax (NaN ignored) in history[0], amax_r = max(history), roll the history one step toward the
    front with history[0] = 0, scale = 448 / amax_r when amax_r is finite and > 0 (else kept)."""
    hist, scale, out = np.zeros(length, np.float32), np.float32(1), []
    for a in amaxes:
        used = scale
        hist[0] = max(hist[0], a)
        amax_r = hist.max()
        hist = np.roll(hist, -1)
        hist[0] = 0
        if np.isfinite(amax_r) and amax_r > 0:
            scale = np.float32(np.float32(448) / np.float32(amax_r))
        out.append((used, hist.copy(), scale))
    return out


def test_delayed_scaling_state_over_a_spike_a_zero_tensor_and_a_nan():
    K = 16
    base = np.linspace(-1, 1, 32 * K, dtype=np.float32).reshape(32, K)
    xs = [base * 2, base * 100, base * 0, base * 0, base * 3, base]   # amax 2, spike 100, zero, zero, 3, 1
    xs[4] = xs[4].copy()
    xs[4][5, 3] = np.nan                                               # a NaN: ignored by the amax
    amaxes = [2.0, 100.0, 0.0, 0.0, 3.0, 1.0]
    recipe = ft.TEDelayedScaling(amax_history_len=2)
    model = torch.nn.Sequential(torch.nn.Linear(K, 16, bias=False))
    w = model[0].weight.detach().numpy().copy()
    ft.emulate(model, recipe, "exact")
    ref = _te_delayed_reference(amaxes, 2)
    ref_w = _te_delayed_reference([np.abs(w).max()] * len(xs), 2)     # the weight's own history
    for step, (x, (used, hist, scale)) in enumerate(zip(xs, ref)):
        y = model(torch.from_numpy(x)).detach().numpy()
        layer = model[0]
        assert layer.amax_history_input.numpy().tolist() == hist.tolist(), step
        assert layer.scale_input.numpy() == scale, step
        # the output used the scale in force before this step's update
        qx = quantize_tensorwise(x, "e4m3fn", scale=used)
        qw = quantize_tensorwise(w, "e4m3fn", scale=ref_w[step][0])
        exp = scaled_mm(qx.codes, qw.codes.T, a_format="e4m3fn", b_format="e4m3fn", scale_a=qx.scale_inv,
                        scale_b=qw.scale_inv, accumulator="exact")
        assert np.array_equal(_bits(y), _bits(exp)), step
    assert [float(s) for _, _, s in ref] == [224.0, 4.480000019073486, 4.480000019073486, 4.480000019073486,
                                             149.3333282470703, 149.3333282470703]
    # the state is in the state_dict: a fresh model loaded from it continues with the same scales
    sd = model.state_dict()
    assert {"0.amax_history_input", "0.scale_input", "0.amax_history_grad_output", "0.fp8emu_step"} <= set(sd)
    other = torch.nn.Sequential(torch.nn.Linear(K, 16, bias=False))
    ft.emulate(other, recipe, "exact")
    other.load_state_dict(sd)
    x = torch.from_numpy(base * 5)
    assert torch.equal(other(x), model(x))


def test_delayed_grad_output_history_follows_backward():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, ft.TEDelayedScaling(amax_history_len=3), "cpu")
    x = torch.ones(16, 16)
    for g in (4.0, 8.0):
        model.zero_grad()
        model(x).backward(torch.full((16, 16), g))
    layer = model[0]
    assert layer.amax_history_grad_output.tolist() == [0.0, 4.0, 8.0]
    assert float(layer.scale_grad_output) == np.float32(57344) / np.float32(8)


# ----------------------------------------------------------------------------- determinism
def test_same_seed_same_bits_and_another_seed_other_bits():
    x, w, b, dy = _data(M=64, K=64, N=64)
    r1 = _run("te-nvfp4", "exact", x, w, b, dy, seed=7)
    r2 = _run("te-nvfp4", "exact", x, w, b, dy, seed=7)
    r3 = _run("te-nvfp4", "exact", x, w, b, dy, seed=8)
    for a, c in zip(r1[1:], r2[1:]):
        assert np.array_equal(_bits(a), _bits(c))
    assert not np.array_equal(r1[3], r3[3])          # stochastic rounding of the gradient changed wgrad
    assert np.array_equal(r1[1], r3[1])              # fprop has no stochastic rounding


@pytest.mark.parametrize("recipe,gpu,splits", [("te-mxfp8", "b200", True), ("torchao-rowwise", "h100", True),
                                               ("te-block", "h100", True), ("te-nvfp4", "b200", False)])
def test_any_thread_count_and_batch_split(recipe, gpu, splits):
    x, w, b, dy = _data(M=1024, K=256, N=256)     # 2**18 elements: fp8emu's threads split the work
    torch_threads = torch.get_num_threads()
    try:
        set_threads(1)
        one = _run(recipe, gpu, x, w, b, dy)
        set_threads(2)
        torch.set_num_threads(2)
        two = _run(recipe, gpu, x, w, b, dy)
    finally:
        set_threads(None)
        torch.set_num_threads(torch_threads)
    for a, c in zip(one[1:], two[1:]):
        assert np.array_equal(_bits(a), _bits(c))
    if not splits:       # NVFP4's per-tensor scale comes from the whole batch's amax
        return
    # row-wise / block-wise scaling along K: the forward of two half batches is the whole batch's
    halves = np.concatenate([_run(recipe, gpu, h, w, b, dy[:512])[1] for h in (x[:512], x[512:])])
    assert np.array_equal(_bits(halves), _bits(one[1]))


# ----------------------------------------------------------------------------- diagnostics
def test_diagnostics_rows_count_nan_saturation_and_error():
    x, w, b, dy = _data(M=64, K=64, N=64)
    x[3, 5] = np.nan
    model, y, dx, dw = _run("te-current", "exact", x, w, b, dy, diagnostics=True)
    rows = ft.diagnostics(model)
    assert [(r["pass"], r["tensor"]) for r in rows] == [
        ("fprop", "input"), ("fprop", "weight"), ("dgrad", "grad_output"), ("dgrad", "weight"),
        ("wgrad", "grad_output"), ("wgrad", "input")]
    fin = rows[0]
    assert tuple(fin) == ft.swap.ROW_KEYS
    assert fin["n_nonfinite"] == 1 and fin["layer"] == "0" and fin["step"] == 0
    xf = np.delete(x.ravel(), 3 * 64 + 5)
    assert fin["amax"] == np.abs(xf).max()
    assert fin["scale"] == pytest.approx(448 / np.abs(xf).max(), rel=1e-6)
    assert fin["frac_saturated"] == pytest.approx(1 / x.size)     # only the amax element sits at 448
    # TE's amax ignores the NaN; the NaN's row is NaN on the GPU as here, the others finite
    assert np.isnan(y[3]).all() and np.isfinite(np.delete(y, 3, axis=0)).all()
    assert np.isnan(rows[0]["gemm_rel_err"])
    assert 0 < rows[2]["gemm_rel_err"] < 0.1
    ft.reset_diagnostics(model)
    assert ft.diagnostics(model) == []


def test_diagnostics_off_records_nothing():
    x, w, b, dy = _data(M=64, K=64, N=64)
    model = _run("te-current", "cpu", x, w, b, dy)[0]
    assert ft.diagnostics(model) == []


def test_underflow_and_flushed_fractions():
    # a block of tiny values beside a large one: per-tensor E4M3 scaling sends them below the
    # subnormals (zero code) or into them
    x = np.zeros((16, 16), np.float32)
    x[0, 0] = 448.0
    x[1, :8] = 2.0 ** -10          # 2**-10 * 1 -> below 2**-9: underflows to zero (RNE to 0)
    x[2, :4] = 2.0 ** -8           # subnormal in E4M3
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-current", "exact", diagnostics=True)
    model(torch.from_numpy(x))
    row = ft.diagnostics(model)[0]
    assert row["frac_underflow"] == 8 / 256 and row["frac_flushed"] == 4 / 256


# ----------------------------------------------------------------------------- bad input
def test_wrapping_twice_names_the_layer():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Sequential(torch.nn.Linear(16, 16)))
    ft.emulate(model, "te-current", "h100")
    with pytest.raises(ValueError, match=r"^layer '0' is already emulated \(te-current on h100\)"):
        ft.emulate(model, "te-delayed", "h100")


def test_layers_the_recipe_cannot_take_are_skipped_with_the_multiple():
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 64))
    rep = ft.emulate(model, "te-mxfp8", "b200")
    assert rep.swapped == {}
    assert rep.skipped == {"0": "out_features 48 is not a multiple of 32, which te-mxfp8 on b200 needs",
                           "1": "in_features 48 is not a multiple of 32, which te-mxfp8 on b200 needs"}
    assert type(model[0]) is torch.nn.Linear
    rep = ft.emulate(torch.nn.Sequential(torch.nn.Linear(64, 64)), "te-nvfp4", "b200")
    assert "0" in rep.swapped and "mxf4nvf4" in rep.swapped["0"]
    rep = ft.emulate(torch.nn.Sequential(torch.nn.Linear(32, 32)), "te-nvfp4", "b200")
    assert rep.skipped["0"].startswith("in_features 32 is not a multiple of 64")


def test_a_token_count_the_wgrad_cannot_take_is_refused_naming_the_layer():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-mxfp8", "b200")
    with pytest.raises(ValueError, match=r"^layer '0': 40 tokens .* not a multiple of 32"):
        model(torch.ones(40, 32))


def test_unknown_names_and_bad_objects():
    m = torch.nn.Sequential(torch.nn.Linear(16, 16))
    with pytest.raises(ValueError, match="unknown recipe 'fp8'; accepted: te-delayed, te-current"):
        ft.emulate(m, "fp8")
    with pytest.raises(ValueError, match="unknown gpu 'a100'; accepted: h100, h100-fast, b200, cpu, exact"):
        ft.emulate(m, "te-current", "a100")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        ft.emulate([1, 2], "te-current")
    with pytest.raises(ValueError, match="seed must be an int >= 0, got -1"):
        ft.emulate(m, "te-current", seed=-1)
    with pytest.raises(TypeError, match="diagnostics must be True or False"):
        ft.emulate(m, "te-current", diagnostics="yes")
    with pytest.raises(ValueError, match="wrap a bare nn.Linear"):
        ft.emulate(torch.nn.Linear(16, 16), "te-current")
    assert type(m[0]) is torch.nn.Linear            # nothing was swapped by the failed calls


def test_recipe_objects_are_frozen_and_configurable():
    r = ft.TEDelayedScaling(amax_history_len=16, amax_compute_algo="most_recent", margin=1)
    with pytest.raises(Exception):
        r.margin = 2
    with pytest.raises(ValueError, match="TE refuses pure E5M2"):
        ft.TEDelayedScaling(fp8_format="E5M2")
    m = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(m, r, ft.get_stack("cpu"))
    assert m[0].amax_history_input.shape == (16,)


# ----------------------------------------------------------------------------- torchao, live
def _torchao_operand(t, fmt, granularity, dim, pow2):
    ao = pytest.importorskip("torchao.float8.float8_scaling_utils")
    cfg = pytest.importorskip("torchao.float8.config")
    tt = pytest.importorskip("torchao.float8.float8_training_tensor")
    mm = tt.ScaledMMConfig(True, False, False, False)
    lin = tt.LinearMMConfig(mm, mm, mm)
    gran = cfg.ScalingGranularity.TENSORWISE if granularity == "tensorwise" else cfg.ScalingGranularity.AXISWISE
    dtype = torch.float8_e4m3fn if fmt == "e4m3fn" else torch.float8_e5m2
    f8 = ao.hp_tensor_to_float8_dynamic(t, dtype, lin, scaling_granularity=gran, axiswise_dim=dim,
                                        round_scales_to_power_of_2=pow2)
    return f8._data.view(torch.uint8).numpy(), torch.reciprocal(f8._scale).numpy()


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise"])
def test_torchao_operands_equal_torchao_float8_bit_for_bit(granularity):
    """The torchao recipes' quantized operands equal torchao's own Float8TrainingTensor (codes and
    1/scale) for every tensor and usage: x, w and dy, row-wise along K of each GEMM."""
    recipe = ft.get_recipe(f"torchao-{granularity}")
    r = np.random.default_rng(3)
    x = (r.standard_normal((64, 32)) * r.lognormal(0, 2, (64, 1))).astype(np.float32)
    x[0, :4] = [3e-39, -1e-41, 0.0, 7e5]              # subnormal input, a value past E4M3's max
    w = (r.standard_normal((48, 32)) * 0.05).astype(np.float32)
    dy = (r.standard_normal((64, 48)) * 1e-5).astype(np.float32)
    pow2 = granularity == "rowwise"
    # (role, GEMM-layout array, K axis, pass, torchao's axiswise_dim on the same array)
    cases = [("input", x, 1, "fprop", -1), ("weight", w.T, 0, "fprop", 0), ("grad_output", dy, 1, "dgrad", -1),
             ("weight", w, 0, "dgrad", 0), ("grad_output", dy.T, 1, "wgrad", -1), ("input", x, 0, "wgrad", 0)]
    for role, arr, k_axis, pass_, dim in cases:
        op = recipe.operand(role, np.ascontiguousarray(arr), k_axis, pass_)
        codes, sinv = _torchao_operand(torch.from_numpy(np.ascontiguousarray(arr)), recipe.formats()[role],
                                       granularity, dim if granularity == "rowwise" else None, pow2)
        assert np.array_equal(op.codes, codes), (role, pass_)
        assert np.array_equal(np.asarray(op.scale_inv, np.float32).reshape(sinv.shape).view(np.uint32),
                              sinv.astype(np.float32).view(np.uint32)), (role, pass_)


def test_an_inf_gradient_saturates_as_te_current_scaling_does_and_is_counted():
    # TE's current scaling: an Inf makes the amax Inf, so the scale is 1 and the Inf saturates to
    # +-57344 (E5M2's max): dgrad stays finite, the Inf is counted
    x, w, b, dy = _data(M=64, K=64, N=64)
    dy[2, 7] = np.inf
    model, y, dx, dw = _run("te-current", "exact", x, w, b, dy, diagnostics=True)
    g = [r for r in ft.diagnostics(model) if r["pass"] == "dgrad" and r["tensor"] == "grad_output"][0]
    assert g["n_nonfinite"] == 1 and g["scale"] == 1.0
    assert np.isfinite(dx).all()
    q = quantize_tensorwise(dy, "e5m2")
    assert float(q.scale) == 1.0 and q.dequantize()[2, 7] == 57344.0


def test_an_old_torch_is_refused_with_the_version_needed(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.6.0")
    with pytest.raises(RuntimeError, match=r"^fp8emu.torch needs torch >= 2.7; this is torch 2.6.0$"):
        ft.emulate(torch.nn.Sequential(torch.nn.Linear(16, 16)), "te-current")


# ----------------------------------------------------------------------------- FP8 attention (inference)
def test_fp8_sdpa_is_fp8emu_attention_per_batch_element():
    from fp8emu.attention import attention
    r = np.random.default_rng(5)
    q, k, v = (r.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(3))
    sdpa = ft.fp8_sdpa("fa3-fp8")
    with torch.no_grad():
        out = sdpa(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), is_causal=True).numpy()
    for b in range(2):
        exp = attention(q[b], k[b], v[b], "fa3-fp8", causal=True, reference=False).out
        assert np.array_equal(_bits(out[b]), _bits(exp))
    ref = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(t) for t in (q, k, v)), is_causal=True)
    assert 0 < np.abs(out - ref.numpy()).max() < 0.2          # FP8, not float32, and close to it
    with pytest.raises(RuntimeError, match="forward only"):
        sdpa(torch.from_numpy(q).requires_grad_(True), torch.from_numpy(k), torch.from_numpy(v))
    with pytest.raises(ValueError, match="no attn_mask"):
        with torch.no_grad():
            sdpa(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), attn_mask=torch.ones(64, 64))


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise"])
def test_torchao_operands_equal_the_recorded_torchao_vectors(granularity):
    """The same proof without torchao installed: vectors recorded by tools/record_torchao_operands.py."""
    from pathlib import Path
    rec = np.load(Path(__file__).parent / "data" / "torch_emulate" / "torchao_operands.npz")
    assert str(rec["torchao_version"]) == "0.18.0"
    recipe = ft.get_recipe(f"torchao-{granularity}")
    usages = [("input", "x", False, 1, "fprop"), ("weight", "w", True, 0, "fprop"),
              ("grad_output", "dy", False, 1, "dgrad"), ("weight", "w", False, 0, "dgrad"),
              ("grad_output", "dy", True, 1, "wgrad"), ("input", "x", False, 0, "wgrad")]
    for i, (role, name, tr, k_axis, pass_) in enumerate(usages):
        arr = np.ascontiguousarray(rec[name].T if tr else rec[name])
        op = recipe.operand(role, arr, k_axis, pass_)
        codes, sinv = rec[f"{granularity}_{i}_codes"], rec[f"{granularity}_{i}_scale_inv"]
        assert np.array_equal(op.codes, codes), (role, pass_)
        assert np.array_equal(np.asarray(op.scale_inv, np.float32).reshape(sinv.shape).view(np.uint32),
                              sinv.view(np.uint32)), (role, pass_)


def test_delayed_state_stays_float32_when_the_model_is_converted_to_bfloat16():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-delayed", "h100")
    model.to(torch.bfloat16)
    assert model[0].amax_history_input.dtype == model[0].scale_input.dtype == torch.float32
    assert model(torch.ones(16, 16, dtype=torch.bfloat16)).dtype == torch.bfloat16


# ----------------------------------------------------------------------------- the cpu stack against torch
def test_cpu_stack_equals_torch_scaled_mm_on_the_cpu():
    """te-current on the cpu stack: each GEMM equals torch's own CPU torch._scaled_mm run on the same
    FP8 operands (whichever path torch takes for it), bit for bit, fprop with its bias."""
    x, w, b, dy = _data(M=128, K=256, N=64)
    _, y, dx, dw = _run("te-current", "cpu", x, w, b, dy)
    qx, qw, qg = (quantize_tensorwise(x, "e4m3fn"), quantize_tensorwise(w, "e4m3fn"),
                  quantize_tensorwise(dy, "e5m2"))

    def f8(codes, fmt, col_major=False):
        dt = torch.float8_e4m3fn if fmt == "e4m3fn" else torch.float8_e5m2
        if col_major:               # torch's B operand: column-major
            return torch.from_numpy(np.ascontiguousarray(codes.T)).view(dt).t()
        return torch.from_numpy(np.ascontiguousarray(codes)).view(dt)

    def s(q):
        return torch.tensor(float(q.scale_inv), dtype=torch.float32)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # K <= 768: any thread count would do; one is the plainest
    try:
        ty, tdx, tdw = _torch_gemms(f8, s, qx, qw, qg, b)
    finally:
        torch.set_num_threads(threads)
    for got, exp, what in ((y, ty, "fprop"), (dx, tdx, "dgrad"), (dw, tdw, "wgrad")):
        assert np.array_equal(_bits(got), _bits(exp.numpy())), what


def _torch_gemms(f8, s, qx, qw, qg, b):
    ty = torch._scaled_mm(f8(qx.codes, "e4m3fn"), f8(qw.codes.T, "e4m3fn", True), scale_a=s(qx), scale_b=s(qw),
                          bias=torch.from_numpy(b), out_dtype=torch.float32)
    tdx = torch._scaled_mm(f8(qg.codes, "e5m2"), f8(qw.codes, "e4m3fn", True), scale_a=s(qg), scale_b=s(qw),
                           out_dtype=torch.float32)
    tdw = torch._scaled_mm(f8(qg.codes.T, "e5m2"), f8(qx.codes, "e4m3fn", True), scale_a=s(qg), scale_b=s(qx),
                           out_dtype=torch.float32)
    return ty, tdx, tdw


# ----------------------------------------------------------------------------- block FP8 on Blackwell
@pytest.mark.parametrize("recipe", ["te-block", "deepseek-v3"])
def test_block_fp8_on_b200_with_a_partial_k_block(recipe):
    x, w, b, dy = _data(K=160)          # fprop K = 160: one whole 128-block and a zero-padded one
    _, y, dx, dw = _run(recipe, "b200", x, w, b, dy)
    for got, exp, what in zip((y, dx, dw), _b200_block(recipe, x.astype(BF16), w, dy.astype(BF16),
                                                       np.asarray(b.astype(BF16), np.float32), "bfloat16"),
                              ("fprop", "dgrad", "wgrad")):
        assert np.array_equal(_bits(got), _bits(np.asarray(exp, np.float32))), f"{recipe} {what}"


def test_deepseek_v3_on_b200_quantizes_with_deepgemm_ue8m0_scales():
    from fp8emu.training import ue8m0_block_scales
    amax = [448.0, 449.0, 448.0 * 2.0 ** -20, 448.0 * 2.0 ** -20 * 1.0000001, 0.0, 1e-30, 3e38]
    x = np.zeros((1, 128 * len(amax)), np.float32)
    x[0, ::128] = amax
    got = 1.0 / ue8m0_block_scales(x, (1, 128)).astype(np.float64)
    assert got.tolist() == [[_deepgemm_sf(a) for a in np.float32(amax)]]
    assert got[0, :4].tolist() == [1.0, 2.0, 2.0 ** -20, 2.0 ** -19]
    r = ft.get_recipe("deepseek-v3")
    assert not r.ue8m0_scales and ft.swap.check_combination(r, ft.get_stack("b200")).ue8m0_scales
    assert not ft.swap.check_combination(r, ft.get_stack("h100")).ue8m0_scales


def test_block_fp8_refusals_name_their_source():
    lin = torch.nn.Sequential(torch.nn.Linear(128, 128))
    with pytest.raises(ValueError, match="only power-of-two scales .*fp8_blockwise_scaling.rst at e087141"):
        ft.emulate(lin, ft.TEBlockScaling(use_f32_scales=True), "b200")
    for r in ("te-block", "deepseek-v3"):
        with pytest.raises(ValueError, match="asserts use_split_accumulator=True"):
            ft.emulate(lin, r, "h100-fast")
    assert "does not model" not in " ".join(reason for s in STACKS.values() for _, reason in s.refusals)


def test_autocast_moves_deepseek_v3_between_its_hopper_and_blackwell_scales():
    x, w, b, dy = _data()
    ref = {g: _run("deepseek-v3", g, x, w, b, dy)[1] for g in ("h100", "b200")}
    assert not np.array_equal(_bits(ref["h100"]), _bits(ref["b200"]))
    for home, other in (("b200", "h100"), ("h100", "b200")):
        model, *_ = _run("deepseek-v3", home, x, w, b, dy)
        with ft.autocast(gpu=other):
            y = model(torch.from_numpy(x.copy())).detach().numpy()
        assert np.array_equal(_bits(y), _bits(ref[other])), f"{home} -> {other}"


def test_block_fp8_with_scales_that_are_not_powers_of_two_is_refused_on_the_mx_instruction():
    from fp8emu.torch.gemms import run_gemm
    from fp8emu.training import Operand
    st = quantize_blockwise(np.linspace(-1, 1, 64 * 128).reshape(64, 128), "e4m3fn", pow2=False)
    a = Operand("fp8", st.codes, st.fmt, np.asarray(st.scale_inv, np.float32))
    b = Operand("fp8", st.codes.T.copy(), st.fmt, np.asarray(st.scale_inv, np.float32).T.copy())
    with pytest.raises(ValueError, match="needs power-of-two \\(UE8M0\\) block scales"):
        run_gemm(a, b, "blackwell-tcgen05-mxf8f6f4", "float32")


def test_deepseek_v3_scale_kind_follows_the_stack_and_a_contradiction_is_refused():
    from fp8emu.training import DeepSeekV3, get_stack
    assert DeepSeekV3().on(get_stack("b200")).ue8m0_scales is True
    assert DeepSeekV3().on(get_stack("h100")).ue8m0_scales is False
    assert DeepSeekV3(ue8m0_scales=True).on(get_stack("b200")).ue8m0_scales is True
    with pytest.raises(ValueError, match="contradicts gpu='h100'"):
        DeepSeekV3(ue8m0_scales=True).on(get_stack("h100"))
    with pytest.raises(ValueError, match="contradicts gpu='b200'"):
        DeepSeekV3(ue8m0_scales=False).on(get_stack("b200"))
