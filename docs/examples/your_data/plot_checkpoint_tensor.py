"""
A checkpoint tensor: error vs dynamic range, SQNR vs scale, granularity
=======================================================================

One weight of the demo checkpoint, read by name (as you would name a tensor of your own
``model.safetensors``), drawn three ways.
"""

from fp8emu.lab import plots
from fp8emu.lab.study import demo_checkpoint

ckpt = demo_checkpoint()
name = "model.layers.0.mlp.up_proj.weight"

# %%
# Relative rounding error per binade of ``|x|``, next to the tensor's spread of magnitudes.
fig_range = plots.figure_data_error_vs_range(name, checkpoint=ckpt, formats=["e4m3fn", "e5m2", "e2m1fn"],
                                             label=name)

# %%
# SQNR as a factor multiplies the tensor: unscaled formats only work in a window of scales;
# one scale per tensor removes the dependence.
fig_scale = plots.figure_data_sqnr_vs_scale(name, checkpoint=ckpt, formats=["e4m3fn", "e5m2", "e2m1fn"],
                                            label=name)

# %%
# Scaling granularity: per tensor, per row, per block, MX and NVFP4.
fig_gran = plots.figure_data_granularity(name, checkpoint=ckpt, label=name)
