"""
Given GEMM operands: error vs K for accumulator presets
=======================================================

The demo checkpoint's recorded MLP input activations times its ``up_proj`` weight (stored as
(N, K), as checkpoints store a ``Linear`` weight: ``b_transposed=True``), in e4m3fn with one
scale per tensor, under four accumulators and two tensor-core instruction presets; then the same
operands in block-scaled formats (MX and NVFP4).
"""

from fp8emu.lab import plots
from fp8emu.lab.study import demo_checkpoint

fig_fp8 = plots.figure_data_gemm_error(
    "activations.layers.0.mlp_input", "model.layers.0.mlp.up_proj.weight", b_transposed=True,
    checkpoint=demo_checkpoint(),
    accumulators=["exact", "fp32", "hopper-fast", "hopper", "ada-mma", "blackwell-mma"],
    label="demo activations x up_proj")

# %%
# The same operands in block-scaled formats: blocks of 32 (MX) or 16 (NVFP4) along K.
fig_blocks = plots.figure_data_block_scaled_gemm(
    "activations.layers.0.mlp_input", "model.layers.0.mlp.up_proj.weight", b_transposed=True,
    checkpoint=demo_checkpoint(), recipes=["mxfp8", "mxfp6", "mxfp4", "nvfp4", "nvfp4-rht"],
    label="demo activations x up_proj")
