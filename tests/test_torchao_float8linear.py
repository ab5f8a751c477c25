"""torchao ``Float8Linear(emulate=True)``, forward and backward, reproduced bit for bit by
``fp8emu.torch.emulate(model, "torchao-*", gpu="cpu")``: live against torchao where it is
installed, and against vectors recorded from it by ``tools/record_torchao_float8linear.py`` (with torch
only, and the GEMM arithmetic with NumPy only)."""

import copy
import hashlib
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.torch_cpu import torchao_emulated_mm
from fp8emu.scaling import quantize_axiswise, quantize_tensorwise

DATA = Path(__file__).parent / "data" / "torch_emulate" / "torchao_float8linear.npz"
GRANULARITIES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
OURS = {"tensorwise": "torchao-tensorwise", "rowwise": "torchao-rowwise", "rowwise_with_gw_hp": "torchao-rowwise-gw-hp"}


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _step(torch, model, x, dy):
    xi = x.clone().requires_grad_(True)
    y = model(xi)
    y.backward(dy)
    return [y.detach(), xi.grad] + [p.grad for p in model.parameters()]


def _mismatches(torch, got, exp):
    assert [t.dtype for t in got] == [t.dtype for t in exp]
    return [int((_bits(a.float().numpy()) != _bits(b.float().numpy())).sum()) for a, b in zip(got, exp)]


# ----------------------------------------------------------------------------- live torchao
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("M,K,H", [(64, 784, 48), (400, 64, 32)])   # K of 3 sgemm blocks; 400 tokens: 2
def test_emulate_equals_torchao_float8linear_forward_and_backward(granularity, dtype, M, K, H):
    torch = pytest.importorskip("torch")
    f8 = pytest.importorskip("torchao.float8")
    ft = pytest.importorskip("fp8emu.torch")
    torch.set_num_threads(1)            # MKL's one-thread sgemm order (fp8emu.gemm.torch_cpu)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(K, H), torch.nn.ReLU(), torch.nn.Linear(H, 32))
    dt = getattr(torch, dtype)
    x = (torch.randn(M, K) * torch.exp(torch.randn(M, 1))).to(dt)
    dy = (torch.randn(M, 32) * 1e-2).to(dt)
    ref, emu = copy.deepcopy(model), copy.deepcopy(model)
    base = f8.Float8LinearConfig.from_recipe_name(granularity)
    f8.convert_to_float8_training(ref, config=f8.Float8LinearConfig(**{**base.__dict__, "emulate": True}))
    assert type(ref[0]).__name__ == type(ref[2]).__name__ == "Float8Linear"
    report = ft.emulate(emu, OURS[granularity], "cpu")
    assert list(report.swapped) == ["0", "2"]
    hp_bf16 = granularity == "rowwise_with_gw_hp" and dtype == "bfloat16"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _step(torch, emu, x, dy)
    exp = _step(torch, ref, x, dy)
    # inside the reproduced range the only warning is the bf16 high-precision wgrad's
    assert [str(w.message)[:9] for w in caught] == (["layer '2'", "layer '0'"] if hp_bf16 else [])
    assert got[0].dtype == dt and got[1].dtype == dt          # Float8Linear's output follows the input
    bad = _mismatches(torch, got, exp)                        # y, dx, dw0, db0, dw1, db1
    if hp_bf16:
        # torchao's wgrad here is a bfloat16 torch.mm (oneDNN), not MKL's sgemm: the weight gradients are
        # not reproduced bit for bit (measured: a few in 10^4); everything else is
        assert bad[:2] + bad[3:4] + bad[5:] == [0, 0, 0, 0]
        assert bad[2] < got[2].numel() // 100 and bad[4] < got[4].numel() // 100
    else:
        assert bad == [0] * 6


def test_torchao_emulate_divides_where_scaled_mm_multiplies():
    """The point of the torchao-emulate GEMM: dividing by the scale differs from multiplying by 1/scale."""
    ft = pytest.importorskip("fp8emu.torch")
    from fp8emu.gemm import scaled_mm
    r = np.random.default_rng(0)
    x, w = r.standard_normal((32, 64)).astype(np.float32), r.standard_normal((64, 32)).astype(np.float32) * 0.1
    op_x = ft.get_recipe("torchao-tensorwise").operand("input", x, 1, "fprop")
    op_w = ft.get_recipe("torchao-tensorwise").operand("weight", w, 0, "fprop")
    div = torchao_emulated_mm(op_x.codes, op_x.fmt, op_x.divisor, op_w.codes, op_w.fmt, op_w.divisor)
    mul = scaled_mm(op_x.codes, op_w.codes, a_format="e4m3fn", b_format="e4m3fn", scale_a=op_x.scale_inv,
                    scale_b=op_w.scale_inv, accumulator="torch-cpu-emulated")
    assert 0 < int((_bits(div) != _bits(mul)).sum()) < div.size


# ----------------------------------------------------------------------------- recorded vectors
def _rec():
    rec = np.load(DATA)
    assert str(rec["torchao_version"]) == "0.18.0" and str(rec["torch_version"]).startswith("2.13.0")
    return rec


def _sha(arr):
    return hashlib.sha256(np.ascontiguousarray(arr, np.float32).tobytes()).hexdigest()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.filterwarnings("ignore:layer .*high-precision wgrad:RuntimeWarning")
@cpu_order.use("mkl-2024.2-avx512")      # the CPU the step was recorded on (an AMX Xeon, MKL 2024.2)
def test_emulate_equals_the_recorded_torchao_step(granularity, dtype):
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    rec = _rec()
    K, H = rec["w0"].shape[1], rec["w0"].shape[0]
    model = torch.nn.Sequential(torch.nn.Linear(K, H), torch.nn.ReLU(), torch.nn.Linear(H, rec["w1"].shape[0]))
    with torch.no_grad():
        for i, n in ((0, "0"), (2, "1")):
            model[i].weight.copy_(torch.from_numpy(rec["w" + n]))
            model[i].bias.copy_(torch.from_numpy(rec["b" + n]))
    ft.emulate(model, OURS[granularity], "cpu")
    dt = getattr(torch, dtype)
    y, dx, dw0, db0, dw1, db1 = _step(torch, model, torch.from_numpy(rec["x"]).to(dt),
                                      torch.from_numpy(rec["dy"]).to(dt))
    key = f"{granularity}_{dtype}_"
    for name, got in (("y", y), ("db0", db0), ("dw1", dw1), ("db1", db1)):
        assert np.array_equal(_bits(got.float().numpy()), _bits(rec[key + name])), name
    assert _sha(dx.float().numpy()) == str(rec[key + "dx_sha256"])
    assert _sha(dw0.float().numpy()) == str(rec[key + "dw0_sha256"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@cpu_order.use("mkl-2024.2-avx512")
def test_first_gemm_equals_the_recorded_torchao_output_with_numpy_only(granularity, dtype):
    """Without torch: torchao's quantizer variant and torchao_emulated_mm give the first layer's recorded
    output (K = 400: MKL's sgemm sums it in two K blocks), bias added after the output conversion."""
    rec = _rec()
    odt = np.dtype(np.float32) if dtype == "float32" else np.dtype(ml_dtypes.bfloat16)
    x = rec["x"].astype(odt).astype(np.float32)          # the input as the model saw it
    if granularity == "tensorwise":
        qx = quantize_tensorwise(x, "e4m3fn", variant="torchao")
        qw = quantize_tensorwise(rec["w0"].T, "e4m3fn", variant="torchao")
    else:                                                # both rowwise recipes: power-of-two scales
        qx = quantize_axiswise(x, "e4m3fn", axis=1, pow2=True, variant="torchao")
        qw = quantize_axiswise(np.ascontiguousarray(rec["w0"].T), "e4m3fn", axis=0, pow2=True, variant="torchao")
    y0 = torchao_emulated_mm(qx.codes, qx.fmt, qx.scale, qw.codes, qw.fmt, qw.scale, out_dtype=odt, bias=rec["b0"])
    assert y0.dtype == odt
    assert np.array_equal(_bits(y0.astype(np.float32)), _bits(rec[f"{granularity}_{dtype}_y0"]))
