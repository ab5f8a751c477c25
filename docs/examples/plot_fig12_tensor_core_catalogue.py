"""
Figure 12: the tensor-core catalogue
====================================

FP8 GEMM error against the exact product versus K (256 to 65,536) for every architecture's matrix
instruction preset, on the same data: positive uniform E4M3 inputs, M = N = 8, each preset chained along K
from C = 0 as an MMA kernel's K-loop does. Ada's and Hopper's 13 alignment bits, Blackwell ``mma.sync``'s
31 bits and MMA-Sim's 25-bit ``tcgen05`` model separate as K grows.

The committed file is ``figures/fig12_tensor_core_catalogue.png``; ``fp8emu figures --only
fig12_tensor_core_catalogue`` writes it. This page runs the same function.
"""

from fp8emu.lab import plots

fig = plots.figure_tensor_core_catalogue()
