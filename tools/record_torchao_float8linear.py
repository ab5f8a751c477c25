"""Record torchao ``Float8Linear(emulate=True)``'s training step (forward and backward) as test vectors.

A two-layer model (``Linear(400, 16)``, ReLU, ``Linear(16, 16)``, with biases; weights, biases, the
input and the output gradient made here with NumPy from a fixed seed, never from fp8emu) is
converted with ``torchao.float8.convert_to_float8_training(model, config=Float8LinearConfig(emulate=True,
...))`` for the tensorwise, rowwise and rowwise_with_gw_hp recipes, in float32 and with bfloat16
activations (float32 weights), on one torch thread.  Recorded: the model's output, the input
gradient, every parameter's gradient and the first layer's output (before the ReLU), all as float32
(bfloat16 values are exact in it); the two largest (the input gradient and the first weight's
gradient) as the SHA-256 of their float32 bytes, to keep the file small.  ``K = 400`` makes MKL's sgemm sum the first GEMM in two K blocks.
The results land in ``tests/data/torch_emulate/torchao_float8linear.npz`` with the torchao and torch
versions; ``tests/test_torchao_float8linear.py`` proves ``fp8emu.torch.emulate(..., gpu="cpu")`` and
``fp8emu.gemm.torch_cpu.torchao_emulated_mm`` against them where torchao is not installed.

Usage (in a venv with torch and torchao)::

    python tools/record_torchao_float8linear.py
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
import torchao
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch_emulate" / "torchao_float8linear.npz"
RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
DTYPES = ("float32", "bfloat16")
M, K, H, N = 16, 400, 16, 16
#: Outputs stored as the SHA-256 of their float32 bytes (the largest; bit-identical <=> same digest).
HASHED = ("dx", "dw0")


def inputs():
    r = np.random.default_rng(11)
    return {"x": (r.standard_normal((M, K)) * r.lognormal(0, 1, (M, 1))).astype(np.float32),
            "w0": (r.standard_normal((H, K)) * 0.05).astype(np.float32),
            "b0": (r.standard_normal(H) * 0.1).astype(np.float32),
            "w1": (r.standard_normal((N, H)) * 0.2).astype(np.float32),
            "b1": (r.standard_normal(N) * 0.1).astype(np.float32),
            "dy": (r.standard_normal((M, N)) * 1e-2).astype(np.float32)}


def model_from(data):
    model = torch.nn.Sequential(torch.nn.Linear(K, H), torch.nn.ReLU(), torch.nn.Linear(H, N))
    with torch.no_grad():
        for i, name in ((0, "0"), (2, "1")):
            model[i].weight.copy_(torch.from_numpy(data["w" + name]))
            model[i].bias.copy_(torch.from_numpy(data["b" + name]))
    return model


def step(model, data, dtype):
    """(y, dx, dw0, db0, dw1, db1, y0) of one forward + backward, as float32 arrays."""
    dt = getattr(torch, dtype)
    seen = {}

    def hook(module, args, output):        # returns None: the output itself flows on
        seen["y0"] = output.detach()
    model[0].register_forward_hook(hook)
    x = torch.from_numpy(data["x"]).to(dt).requires_grad_(True)
    y = model(x)
    y.backward(torch.from_numpy(data["dy"]).to(dt))
    outs = [y.detach(), x.grad, model[0].weight.grad, model[0].bias.grad, model[2].weight.grad,
            model[2].bias.grad, seen["y0"]]
    return [t.float().numpy() for t in outs]


def digest(arr) -> str:
    """SHA-256 of a float32 array's bytes (C order)."""
    return hashlib.sha256(np.ascontiguousarray(arr, np.float32).tobytes()).hexdigest()


def main():
    torch.set_num_threads(1)
    data = inputs()
    out = dict(data)
    out["torchao_version"] = np.array(torchao.__version__)
    out["torch_version"] = np.array(torch.__version__)
    for recipe in RECIPES:
        base = Float8LinearConfig.from_recipe_name(recipe)
        cfg = Float8LinearConfig(**{**base.__dict__, "emulate": True})
        for dtype in DTYPES:
            model = model_from(data)
            convert_to_float8_training(model, config=cfg)
            for name, arr in zip(("y", "dx", "dw0", "db0", "dw1", "db1", "y0"), step(model, data, dtype)):
                key = f"{recipe}_{dtype}_{name}"
                if name in HASHED:
                    out[key + "_sha256"] = np.array(digest(arr))
                else:
                    out[key] = arr
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes; torchao {torchao.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
