"""Record torchao's Float8 training operands (codes and 1/scale) as test vectors.

For the tensorwise and rowwise recipes of ``torchao.float8`` (``hp_tensor_to_float8_dynamic``, the
cast ``Float8Linear`` runs), the input, weight and output gradient of a linear layer are quantized as
each of its three GEMMs reads them (the weight transposed for the output GEMM, the gradient transposed
for the weight-gradient GEMM; row-wise scales along each GEMM's K).  The inputs are made here with
NumPy from a fixed seed (never from fp8emu); the results land in
``tests/data/torch_emulate/torchao_operands.npz`` with the torchao and torch versions.
``tests/test_torch_emulate.py`` proves fp8emu.torch's torchao recipes against them where torchao is
not installed.

Usage (in a venv with torch and torchao)::

    python tools/record_torchao_operands.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torchao
from torchao.float8.config import ScalingGranularity
from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
from torchao.float8.float8_training_tensor import LinearMMConfig, ScaledMMConfig

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch_emulate" / "torchao_operands.npz"

#: (role, tensor name, transposed, K axis of the GEMM-layout array, pass)
USAGES = [("input", "x", False, 1, "fprop"), ("weight", "w", True, 0, "fprop"),
          ("grad_output", "dy", False, 1, "dgrad"), ("weight", "w", False, 0, "dgrad"),
          ("grad_output", "dy", True, 1, "wgrad"), ("input", "x", False, 0, "wgrad")]


def inputs():
    r = np.random.default_rng(3)
    x = (r.standard_normal((64, 32)) * r.lognormal(0, 2, (64, 1))).astype(np.float32)
    x[0, :4] = [3e-39, -1e-41, 0.0, 7e5]
    w = (r.standard_normal((48, 32)) * 0.05).astype(np.float32)
    dy = (r.standard_normal((64, 48)) * 1e-5).astype(np.float32)
    return {"x": x, "w": w, "dy": dy}


def main():
    mm = ScaledMMConfig(True, False, False, False)
    lin = LinearMMConfig(mm, mm, mm)
    data = inputs()
    out = dict(data)
    out["torchao_version"] = np.array(torchao.__version__)
    out["torch_version"] = np.array(torch.__version__)
    for gran in ("tensorwise", "rowwise"):
        for i, (role, name, tr, k_axis, pass_) in enumerate(USAGES):
            arr = np.ascontiguousarray(data[name].T if tr else data[name])
            e5m2 = gran == "tensorwise" and role == "grad_output"
            f8 = hp_tensor_to_float8_dynamic(
                torch.from_numpy(arr), torch.float8_e5m2 if e5m2 else torch.float8_e4m3fn, lin,
                scaling_granularity=(ScalingGranularity.TENSORWISE if gran == "tensorwise"
                                     else ScalingGranularity.AXISWISE),
                axiswise_dim=None if gran == "tensorwise" else (-1 if k_axis == 1 else 0),
                round_scales_to_power_of_2=gran == "rowwise")
            out[f"{gran}_{i}_codes"] = f8._data.view(torch.uint8).numpy()
            out[f"{gran}_{i}_scale_inv"] = torch.reciprocal(f8._scale).numpy().astype(np.float32)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} (torchao {torchao.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
