"""Record what torchao's quantizers produce, as test vectors that need neither torch nor torchao.

Runs torchao's own functions (eager, on the CPU) on fixed probe sets built here with NumPy, and writes
inputs and torchao's outputs to ``tests/data/torchao/torchao-VERSION.npz`` (compressed).  Nothing here
imports fp8emu: the expectations are torchao's.  ``tests/test_scaling_torchao.py`` proves fp8emu's
``variant="torchao"`` options against every file there, and against live torchao where it is installed.

Recorded:

* ``to_mx`` (``torchao.prototype.mx_formats.mx_tensor``): 4 scale modes x 5 element types on blocks of
  32 whose amax sits at, one ulp above and two ulps above ``elem_max * 2**k`` for every element maximum
  and every k, blocks holding +-Inf, +-NaN, both, all zeros, -0, subnormals and tiny values, and
  random blocks over the whole exponent range (scale codes, and element codes with FP4 unpacked);
* ``nvfp4_quantize`` (``...nvfp4_tensor``), two-level with ``per_tensor_amax_to_scale(max|x|)`` and
  single-level, on tensors of normal, adversarial (amax at ``6 * 2**k`` +-ulps, tiny, zero) and
  NaN/Inf/zero content;
* ``tensor_to_scale`` + ``to_fp8_saturated`` (``torchao.float8``): tensorwise and axiswise (dims -1 and
  0), with and without ``round_scales_to_power_of_2``, e4m3fn and e5m2, on normal data, NaN, Inf,
  zero/tiny rows and amaxes whose scale lies just below a power of two.

Usage::

    python tools/record_torchao.py          # writes tests/data/torchao/torchao-<installed version>.npz
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torchao"

MX_FORMATS = ("e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn")
MX_MAX = {"e4m3fn": 448.0, "e5m2": 57344.0, "e2m3fn": 7.5, "e3m2fn": 28.0, "e2m1fn": 6.0}
MX_RULES = ("floor", "ceil", "even", "rceil")
F32 = np.float32


def _bump(a, ulps):
    """float32 ``a`` moved by ``ulps`` units in the last place (a > 0)."""
    return (np.array([a], F32).view(np.uint32).astype(np.int64) + ulps).astype(np.uint32).view(F32)[0]


def _sparse_block(rng, width, peak, slot):
    """A block of zeros and a few values below ``peak``, with ``peak`` itself at ``slot``."""
    v = np.zeros(width, F32)
    v[rng.choice(width, 4, replace=False)] = (rng.uniform(-1, 1, 4) * peak).astype(F32)
    v[slot] = peak
    return v


def _special_blocks(rng, width):
    r = lambda: rng.standard_normal(width).astype(F32)   # noqa: E731
    rows = []
    for special in (np.inf, -np.inf, np.nan, -np.nan):
        v = r()
        v[5 % width] = special
        rows.append(v)
    v = r()
    v[0], v[1] = np.inf, np.nan
    rows.append(v)
    rows += [np.zeros(width, F32), -np.zeros(width, F32), np.full(width, np.nan, F32), np.full(width, np.inf, F32)]
    for scale in (1e-45, 1e-42, 1e-40, 1e-39, 1.1754944e-38, 2e-38, 1e-30):
        rows.append((r() * F32(scale)).astype(F32))
    v = np.full(width, 1e-40, F32)
    v[0] = -np.nan
    rows.append(v)
    return rows


def mx_inputs(seed=20261204) -> np.ndarray:
    """Blocks of 32: amax at elem_max * 2**k (+0, +1, +2 ulps) for every element max and k, specials, random."""
    rng = np.random.default_rng(seed)
    rows = []
    for m in MX_MAX.values():
        for k in range(-150, 128):
            a = np.ldexp(m, k)
            if not 0 < a < np.finfo(F32).max:
                continue
            a = F32(a)
            for ulps in (0, 1, 2):
                if a > 0:
                    rows.append(_sparse_block(rng, 32, _bump(a, ulps), (k + ulps) % 32))
    rows += _special_blocks(rng, 32)
    rows.append(np.full(32, 1e-40, F32))
    expo = rng.integers(-140, 125, (256, 1))
    rows += list((rng.standard_normal((256, 32)) * np.exp2(expo)).astype(F32))
    return np.stack(rows).astype(F32)


def nvfp4_inputs(seed=20261205) -> dict:
    """Named 2-D tensors (rows of 16-element blocks); the two-level scale is each tensor's own amax."""
    rng = np.random.default_rng(seed)
    adv = []
    for k in range(-140, 125):
        for ulps in (-1, 0, 1, 2):
            adv.append(_sparse_block(rng, 16, _bump(F32(np.ldexp(6.0, k)), ulps), 3))
    adv += [b for b in _special_blocks(rng, 16) if np.isfinite(b).all()]
    normal = (rng.standard_normal((128, 64)) * np.exp2(rng.integers(-20, 20, (128, 1)))).astype(F32)
    claim = np.zeros((1, 32), F32)
    claim[0, 0], claim[0, 16] = 7976608.5, 9710654.0
    cases = {"adversarial": np.stack(adv).astype(F32), "normal": normal, "claim": claim,
             "zeros": np.zeros((2, 32), F32)}
    for name, value in (("nan", np.nan), ("negnan", -np.nan), ("inf", np.inf), ("neginf", -np.inf)):
        t = normal[:16].copy()
        t[3, 5] = value
        t[7, :16] = value
        cases[name] = t
    return cases


def float8_inputs(seed=20261206) -> dict:
    rng = np.random.default_rng(seed)
    normal = (rng.standard_normal((64, 48)) * np.exp2(rng.integers(-30, 30, (64, 1)))).astype(F32)
    cases = {"normal": normal}
    for name, value in (("nan", np.nan), ("negnan", -np.nan), ("inf", np.inf)):
        t = normal.copy()
        t[1, 2] = value
        cases[name] = t
    t = normal.copy()
    t[1, 2] = -np.inf
    t[5, :], t[6, :], t[7, :] = 0.0, 1e-13, 1e-40
    cases["neginf_zero_tiny"] = t
    cases["zeros"] = np.zeros((4, 8), F32)
    ks = np.arange(-100, 100)
    for fmt, fmax in (("e4m3fn", 448.0), ("e5m2", 57344.0)):
        # amaxes whose scale fmax / amax lies just below (and at) a power of two
        amax = (fmax / (np.exp2(ks) * (1 - 2.0 ** -24))).astype(F32)
        t = (amax[:, None] * rng.uniform(-1, 1, (ks.size, 8))).astype(F32)
        t[:, 0] = amax
        t[::2, 1] = (fmax / np.exp2(ks[::2])).astype(F32)
        cases[f"pow2edge_{fmt}"] = t
    return cases


# ---- torchao runs (imported lazily: the case builders above need only NumPy) ----

def _torch_elem(fmt):
    import torch
    return {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m3fn": "fp6_e2m3",
            "e3m2fn": "fp6_e3m2", "e2m1fn": torch.float4_e2m1fn_x2}[fmt]


def _unpack_fp4(packed: np.ndarray, shape) -> np.ndarray:
    """torchao's ``pack_uint4`` puts the even element in the low nibble."""
    return np.stack([packed & 15, packed >> 4], -1).reshape(shape)


def run_mx(x: np.ndarray, fmt: str, rule: str):
    """(E8M0 scale codes per block, element codes) of torchao ``to_mx`` with blocks of 32 along the last axis."""
    import torch
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    scale, data = to_mx(torch.from_numpy(np.ascontiguousarray(x)), _torch_elem(fmt), 32, ScaleCalculationMode(rule))
    scale = scale.view(torch.uint8).numpy().reshape(x.shape[:-1] + (x.shape[-1] // 32,))
    data = data.view(torch.uint8).numpy()
    if fmt == "e2m1fn":
        data = _unpack_fp4(data, x.shape)
    return scale.copy(), data.reshape(x.shape).copy()


def run_nvfp4(x: np.ndarray, two_level: bool):
    """(UE4M3 scale codes as torchao stores them, E2M1 codes) of torchao ``nvfp4_quantize``."""
    import torch
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    t = torch.from_numpy(np.ascontiguousarray(x))
    pts = per_tensor_amax_to_scale(torch.max(torch.abs(t))) if two_level else None
    scale, data = nvfp4_quantize(t, 16, pts)
    return scale.view(torch.uint8).numpy().copy(), _unpack_fp4(data.view(torch.uint8).numpy(), x.shape)


def run_float8(x: np.ndarray, fmt: str, axis, pow2: bool):
    """(float32 scale, codes) of torchao.float8's dynamic cast; ``axis`` None is tensorwise."""
    import torch
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated
    dtype = _torch_elem(fmt)
    t = torch.from_numpy(np.ascontiguousarray(x))
    if axis is None:
        scale = tensor_to_scale(t, dtype, round_scales_to_power_of_2=pow2)
    else:
        scale = tensor_to_scale(t, dtype, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=axis,
                                round_scales_to_power_of_2=pow2)
    codes = to_fp8_saturated(t.to(torch.float32) * scale, dtype)
    return scale.numpy().astype(F32).copy(), codes.view(torch.uint8).numpy().copy()


FLOAT8_AXES = {"tensorwise": None, "axis-1": -1, "axis0": 0}


def record() -> dict:
    import torch
    import torchao
    arrays = {"torchao_version": np.array(torchao.__version__), "torch_version": np.array(torch.__version__)}
    x = mx_inputs()
    arrays["mx/x"] = x
    for fmt in MX_FORMATS:
        for rule in MX_RULES:
            s, c = run_mx(x, fmt, rule)
            arrays[f"mx/{fmt}/{rule}/scale"], arrays[f"mx/{fmt}/{rule}/codes"] = s, c
    for name, t in nvfp4_inputs().items():
        arrays[f"nvfp4/{name}/x"] = t
        for mode, two in (("two", True), ("single", False)):
            s, c = run_nvfp4(t, two)
            arrays[f"nvfp4/{name}/{mode}/scale"], arrays[f"nvfp4/{name}/{mode}/codes"] = s, c
    for name, t in float8_inputs().items():
        arrays[f"float8/{name}/x"] = t
        for fmt in ("e4m3fn", "e5m2"):
            for gran, axis in FLOAT8_AXES.items():
                for pow2 in (False, True):
                    s, c = run_float8(t, fmt, axis, pow2)
                    key = f"float8/{name}/{fmt}/{gran}/{'pow2' if pow2 else 'plain'}"
                    arrays[key + "/scale"], arrays[key + "/codes"] = s, c
    return arrays


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    arrays = record()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"torchao-{arrays['torchao_version']}.npz"
    np.savez_compressed(path, **arrays)
    print(f"wrote {path} ({path.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
    main()
