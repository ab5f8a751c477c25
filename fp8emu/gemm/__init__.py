"""Emulated FP8 GEMM (``scaled_mm``) with bit-exact models of GPU accumulators.

``scaled_mm`` computes ``(A @ B) * scale_a * scale_b (+ bias)`` from FP8 codes
with the semantics of ``torch._scaled_mm``.  How the K products are summed is
chosen by an *accumulator*, a name of the one lookup :func:`get_model` (:data:`MODELS`): a
tensor-core model is a catalogue :class:`Instruction` row plus a kernel :class:`Policy`
(:mod:`fp8emu.gemm.models`), evaluated by the catalogue's engine:

``"exact"``
    The exact sum, rounded once to float32 (round to nearest even).
``"fp32"``
    Sequential IEEE float32 additions in K order (products are exact in float32).
``"hopper-fast"``
    The Hopper (sm_90) FP8 tensor core as used by ``use_fast_accum=True``:
    a chain of k = 32 MMA steps whose accumulator never leaves the tensor core.
``"hopper"``
    ``use_fast_accum=False``: the same steps, with the partial sum promoted
    (added with float32 round-to-nearest-even) into an FP32 accumulator every
    4 steps (K = 128), after which the tensor-core partial sum restarts at zero.
``"torch-cpu-onednn"``, ``"torch-cpu-emulated"``
    torch's own CPU ``_scaled_mm``, one preset per path, each with its own scaling, bias and
    output conversion; bit for bit against torch 2.13.0+cpu (oneDNN: any shape, K <= 4096, 1-2 threads;
    emulated: M, N >= 2 and K <= 4096 on one thread, K <= 768 on two).  Which path torch takes when, and the
    evidence: :mod:`fp8emu.gemm.torch_cpu`.  With unit or power-of-two scales the oneDNN path's
    per-product scaling is exact, so ``"fp32"`` gives its float32 results too (tested on the
    recorded cases); with other scales it does not.

``use_fast_accum=True`` / ``False`` (torch's flag) selects ``"hopper-fast"`` / ``"hopper"``; the
CPU ignores the flag, so the ``torch-cpu-*`` presets accept both.

One tensor-core step (model fitted to, and bit-exact on, 170 ``torch._scaled_mm``
outputs recorded on an H200; see ``tests/test_gemm.py``):

1. Each product ``a_k * b_k`` carries the *unnormalised* exponent
   ``e(a_k) + e(b_k)`` (``e`` of a subnormal is the format's minimum exponent);
   the incoming accumulator carries its own exponent ``floor(log2|c|)``.
2. All terms are aligned to the largest of these exponents ``E`` and each is
   truncated toward zero (sign-magnitude) to a multiple of ``2**(E - 13)``.
3. The truncated terms are added exactly; the sum is normalised and truncated
   toward zero to 14 significant bits.

A 16-wide step behaves as a 32-wide step with zero products, so K = 16 needs no
special case.  ``"hopper"`` is the catalogue row ``hopper-wgmma`` (this step) with the policy
"promote every 4 steps, cuBLAS's split-K"; other hardware is a :class:`GemmModel` of a row
(:func:`step_row` states a step by its widths: products per step, fraction bits, result bits and
rounding) and a :class:`Policy` (promotion interval, split-K, where block scales apply).

Split-K: for long K and few output tiles cuBLAS splits K into ``S`` contiguous
pieces of ``ceil(ceil(K / 128) / S)`` K-tiles of 128 (the last piece takes the
rest).  Each piece is reduced from zero exactly as above (its own tensor-core
chain and, for ``"hopper"``, its own FP32 accumulator), and the ``S`` float32
piece results are then added in piece order with float32 round-to-nearest-even.
With ``split_k="cublas"`` (the presets) ``S`` comes from :func:`cublas_split_k`,
the choice observed on the H200 (see there; an assumption for other shapes).

Epilogue (fitted to the same data): float32 result ``acc``; scalar scales are
first multiplied, ``alpha = fl32(scale_a * scale_b)``, then
``fl32(acc * alpha)``; with a bias the value ``acc * alpha + bias`` is rounded
*once* to the output type (bias given in the output type);  row-wise scales give
``fl32(fl32(acc * scale_a[m]) * scale_b[n])``.  Block scales (1x128 / 128x128)
multiply each K-block's tensor-core partial sum before it is promoted:
``acc = fl32(acc + partial * fl32(sa[m, kb] * sb[kb, n]))`` with one rounding
(as DeepSeek-V3 / DeepGEMM kernels do with an FMA).

Limits of the fit: the dev set covers K <= 16384 with M = N = 32 (and
M = 64 at K = 256); every recorded case is bit-exact, K = 16384 through 6-way
split-K.  How cuBLAS picks the split count for other shapes is not recorded
(:func:`cublas_split_k`).  With split-K the scales and bias are applied once,
after the pieces are summed (only unit scales were recorded at K = 16384).
FP8 outputs (``scale_result``) follow cuBLASLt's documented D-scale semantics
but were not recorded on the GPU.

Matrix instructions of other GPUs (Ada, Hopper ``wgmma``, Blackwell ``mma.sync`` and ``tcgen05``,
RTX Blackwell, CDNA3), one tile at a time or chained through a GEMM, with the evidence behind
each: :mod:`fp8emu.gemm.instructions` (:func:`mma`, :func:`presets`).  The instructions as data are
:mod:`fp8emu.gemm.catalogue`; what each datapath computes, :mod:`fp8emu.gemm.datapaths`; the fast
routes that give the same bits, :mod:`fp8emu.gemm.routes`.

Block-scaled GEMMs (MX, NVFP4, mixed) are in :mod:`fp8emu.gemm.block_scaled`
(:func:`block_scaled_mm`; ``scaled_mm`` hands MX / NVFP4 ScaledTensors to it).

Products are exact in float64 (at most 8 significant bits), so the emulation
works on float64 values scaled by powers of two; all work is vectorised over
M, N and the products of a step, in chunks of rows so memory stays bounded.
"""

from __future__ import annotations

from .block_scaled import block_scaled_mm, nvfp4_alpha
from .catalogue import INSTRUCTIONS, Instruction, get_instruction, presets
from .instructions import dot, mma
from .models import MODELS, GemmModel, Policy, cublas_split_k, get_model, split_bounds, step_row
from .scaled_mm import scaled_mm

__all__ = ["scaled_mm", "cublas_split_k", "split_bounds", "block_scaled_mm", "step_row",
           "nvfp4_alpha", "Instruction", "INSTRUCTIONS", "get_instruction", "mma", "dot", "presets",
           "GemmModel", "Policy", "MODELS", "get_model"]
