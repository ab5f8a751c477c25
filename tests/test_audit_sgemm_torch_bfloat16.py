"""``torch_cpu.sgemm`` of a torch bfloat16 tensor is one line naming the operand.

``sgemm`` takes float32, float16 and bfloat16 operands (bfloat16 is exact in float32) and reads a torch
float32 tensor as its array; a torch bfloat16 tensor, which NumPy cannot hold, raised torch's bare
"TypeError: Got unsupported ScalarType BFloat16" (the probes already name it).
"""

import numpy as np
import pytest

from fp8emu.gemm import torch_cpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("which", ["x", "y"])
def test_a_torch_bfloat16_tensor_is_one_line_naming_the_operand(which):
    a, b = np.ones((4, 8), np.float32), np.ones((8, 4), np.float32)
    args = {"x": a, "y": b}
    args[which] = torch.ones(args[which].shape, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=rf"sgemm: {which} cannot be read as a NumPy array .*tensor\.float\(\)"):
        torch_cpu.sgemm(args["x"], args["y"])


def test_a_torch_float32_tensor_is_still_read():
    got = torch_cpu.sgemm(torch.ones(4, 8), np.ones((8, 4), np.float32))
    assert got.dtype == np.float32 and (got == 8.0).all()
