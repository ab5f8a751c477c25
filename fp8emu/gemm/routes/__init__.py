"""The fast evaluation routes of the matrix instructions.

Every route computes the bits of the reference steps of :mod:`fp8emu.gemm.datapaths` where its
contract holds, and tests/test_gemm_routes.py proves each one equal to them on every preset of
the catalogue.  :func:`fp8emu.gemm.instructions.mma` picks the route:

========================================  ======================================================
route (module)                            applies to (its contract)
========================================  ======================================================
exact (:mod:`.exact`)                     one GEMM tile of 4096 outputs or more, float32 output,
                                          ``"fused"`` / ``"paired"`` / ``"scaled"`` (E8M0, one
                                          block per step), where a sample shows few steps whose
                                          grid cuts a product; declines otherwise
operands (:mod:`.operands`)               tiles (512 outputs or more) and GEMMs of FP8/FP6/FP4
                                          codes: ``"fused"``, ``"paired"``, ``"scaled"`` with a
                                          block a multiple of the step
groups (:mod:`.groups`)                   tiles and GEMMs through ``"grouped"`` instructions whose
                                          group sums are exact in float32
tables (:mod:`.tables`)                   anything else of FP8/FP6/FP4 codes: rows, small tiles,
                                          other block-scaled kinds
wide (:mod:`.wide`)                       rows of unbounded exponents (float64 output: step
                                          widths no instruction has, the block-scaled models)
                                          on decoded finite operands, block scales folded in
reference (:mod:`fp8emu.gemm.datapaths`)  the 16-bit inputs (float16, bfloat16, tf32), and the
                                          rest
========================================  ======================================================

What the routes share has a module of its own: :mod:`.codes` (per-code tables and decoding),
:mod:`.steps` (step arithmetic on the routes' layouts), :mod:`.layout` (transposes and K-major codes
in 8-byte words) and :mod:`.workspace` (per-thread work arrays); every route checks its operands
with :func:`fp8emu.interop.byte_codes`.
"""

from __future__ import annotations

import numpy as np

from ...interop import byte_codes
from .exact import run_exact
from .groups import groups_exact, run_groups
from .operands import run_operands


def run_tiles(ins, a, b, c, fa, fb, scales=None):
    """The operand route (:func:`run_operands`, same arguments), a single GEMM tile (T = 1) trying
    the exact route (:func:`run_exact`) first."""
    T, M, N = c.shape
    if T == 1 and N < M:
        # every datapath is symmetric in A and B: the longer side innermost (long element-wise loops)
        sw = None if scales is None else (scales[1], scales[0], scales[2])
        return np.swapaxes(run_tiles(ins, b, a, np.swapaxes(c, 1, 2), fb, fa, sw), 1, 2)
    if T == 1:
        a, b = byte_codes(a, fa, "a"), byte_codes(b, fb, "b")
        d = run_exact(ins, a[0], b[0], c[0], fa, fb, scales)
        if d is not None:
            return d[None]
    return run_operands(ins, a, b, c, fa, fb, scales)


def tile_route(ins, fa, fb, block):
    """The route of a tile or GEMM that decodes each operand once (:func:`run_tiles` or
    :func:`run_groups`), or ``None`` where the code-pair tables must serve."""
    if ins.datapath in ("fused", "paired") or (ins.datapath == "scaled" and block % ins.step == 0):
        return run_tiles
    if ins.datapath == "grouped" and ins.group in (8, 16, 32, 64) and groups_exact(ins, fa, fb):
        return run_groups
    return None

