"""GPU stacks: which tensor-core model runs each GEMM pass of a linear layer, and in which dtype.

A :class:`Stack` names, per kind of operand, the accumulator that
:func:`fp8emu.gemm.scaled_mm` (per-tensor, row-wise and 1x128/128x128 block-scaled FP8)
or :func:`fp8emu.gemm.block_scaled_mm` (MXFP8, NVFP4) is called with, and the dtype of
the activations, gradients and GEMM outputs the stack computes in.  Per-tensor FP8 GEMMs
choose between the split accumulator (``use_split_accumulator=True`` in Transformer
Engine, ``use_fast_accum=False`` in torch) and fast accumulation per pass, as the recipe
says (:meth:`fp8emu.training.TrainingRecipe.split`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["Stack", "STACKS", "stack_names", "get_stack", "CPU_ACCUMULATOR"]

#: torch's CPU ``_scaled_mm``: resolved per GEMM, as torch chooses, to ``"torch-cpu-onednn"`` or
#: ``"torch-cpu-emulated"`` (:func:`fp8emu.gemm.torch_cpu.cpu_path`, from the operands' dtypes, their
#: scale kinds, ``torch.backends.mkldnn`` and this CPU's flags) by :func:`fp8emu.torch.gemms.run_gemm`.
CPU_ACCUMULATOR = "torch-cpu"

#: Blackwell's FP8 GEMM instruction for per-tensor FP8 (cuBLASLt on sm_100 runs tcgen05).
BLACKWELL_FP8 = "blackwell-tcgen05-f8f6f4"

#: Blackwell's MXFP8 instruction, which also runs 1x128 / 128x128 block FP8 on sm_100: Transformer
#: Engine converts ``Float8BlockScaling`` tensors to MXFP8 for its GEMM ("Blackwell and later (SM >=
#: 10.0) - the recipe is emulated with MXFP8 ... Only scaling factors that are powers of 2 are
#: supported": ``docs/features/low_precision_training/fp8_blockwise_scaling/fp8_blockwise_scaling.rst``
#: at e087141f0e001e6d319f111e8bcfea2bf5d0f346; ``transformer_engine/common/swizzle/swizzle_block_scaling.cu``
#: takes each float32 scale's exponent byte as its E8M0 code and writes it to the four 1x32 slots of its
#: 1x128 block, or to every slot of its 128x128 block); DeepGEMM's ``sm100_fp8_gemm_1d1d.cuh`` (at
#: cfe29c47913ede8d1b9213063728489d35c882c6, deepseek-ai/DeepGEMM) reads one UE8M0 scale per 128 of K
#: (``BLOCK_K == 128``, four packed per uint32) for its ``tcgen05`` block-scaled MMAs of K = 32.
BLACKWELL_MXF8 = "blackwell-tcgen05-mxf8f6f4"


@dataclasses.dataclass(frozen=True)
class Stack:
    """A GPU stack: the tensor-core model of each kind of GEMM and the dtype it computes in.

    Attributes
    ----------
    name, description : str
    split, fast : str or GemmModel
        :func:`fp8emu.gemm.scaled_mm` accumulator of a per-tensor / row-wise FP8 GEMM with
        the split accumulator (``use_split_accumulator=True``) and with fast accumulation.
    block_fp8 : str, GemmModel or None
        GEMM model of 1x128 / 128x128 block-scaled FP8 GEMMs (block scales applied as each
        128-wide K block joins the FP32 accumulator); None: the stack does not run them.
    mx, nvfp4 : str, block-scaled GemmModel or None
        :func:`fp8emu.gemm.block_scaled_mm` accumulator for MXFP8 / NVFP4 operands; None:
        the stack has no such tensor cores.
    dtype : {"bfloat16", "float32"}
        Activations and output gradients are rounded to it before they are quantized, and
        fprop / dgrad outputs are produced in it.  wgrad is always produced in float32 (fp32
        master weights; torch's autograd accumulates ``.grad`` in float32).
    torchao : str or None
        The GEMM of torchao's recipes (``"torchao-emulate"``: ``Float8Linear(emulate=True)``'s
        ``torch.mm(a / sa, b / sb)``, see :func:`fp8emu.gemm.torch_cpu.torchao_emulated_mm`;
        its high-precision GEMMs are float32 ``torch.mm``).  None: torchao's GEMMs are the
        stack's ``split`` / ``fast`` ones (``Float8Linear`` without ``emulate`` calls
        ``torch._scaled_mm``).
    refusals : tuple of (recipe family, reason)
        One-line reasons for recipe families the stack refuses.
    block_fp8_mx : bool
        The stack runs 1x128 / 128x128 block-scaled FP8 GEMMs on the MXFP8 instruction
        (``block_fp8`` names it): each float32 128-block scale, a power of two, becomes its
        UE8M0 code (the float's exponent byte) repeated over the four 32-element scale slots
        of the block, so the recipe must quantize with power-of-two scales
        (:meth:`fp8emu.training.TrainingRecipe.on`).
    k_multiples : tuple of (recipe family, int)
        What every GEMM's K must be a multiple of for the stack's instruction (whole
        instructions along K: 64 for ``kind::mxf4nvf4``, 32 for ``kind::mxf8f6f4``).

    Examples
    --------
    >>> get_stack("h100").split, get_stack("h100").fast
    ('hopper', 'hopper-fast')
    >>> get_stack("b200").nvfp4
    'blackwell-tcgen05-mxf4nvf4'
    """

    name: str
    description: str
    split: object
    fast: object
    block_fp8: object = None
    mx: object = None
    nvfp4: object = None
    dtype: str = "bfloat16"
    refusals: tuple = ()
    k_multiples: tuple = ()
    torchao: object = None
    block_fp8_mx: bool = False

    def __post_init__(self):
        # the activations are rounded to ``dtype`` and the outputs produced in it: another dtype (float16)
        # was half honoured (float32 activations, float16 outputs)
        if self.dtype not in ("bfloat16", "float32"):
            raise ValueError(f"Stack {self.name!r}: dtype must be 'bfloat16' or 'float32', got {self.dtype!r}")
        if not isinstance(self.block_fp8_mx, bool):
            raise TypeError(f"Stack {self.name!r}: block_fp8_mx must be True or False, got {self.block_fp8_mx!r}")

    def multiple(self, family: str) -> int:
        """What K must be a multiple of for ``family``'s GEMMs on this stack (1: anything)."""
        return dict(self.k_multiples).get(family, 1)

    def accumulator(self, family: str, split: bool):
        """The accumulator of one GEMM of a recipe family (``"fp8"``, ``"fp8-block"``, ``"mx"``,
        ``"nvfp4"``, ``"hp"``; torchao's ``"torchao"`` / ``"torchao-hp"``), or ValueError with
        the stack's reason."""
        if family in ("torchao", "torchao-hp"):
            if self.torchao is not None:
                return self.torchao
            family = "fp8" if family == "torchao" else "hp"
        if family == "hp":
            # torch's CPU: a high-precision GEMM is torch's float32 mm (MKL's sgemm), not an exact one
            return "torch-cpu" if self.fast == "torch-cpu" else None
        acc = {"fp8": self.split if split else self.fast, "fp8-block": self.block_fp8,
               "mx": self.mx, "nvfp4": self.nvfp4}[family]
        if acc is None:
            reason = dict(self.refusals).get(family, f"stack {self.name!r} has no {family} GEMM")
            raise ValueError(reason)
        return acc


_NO_BLOCK_TC = "needs Blackwell block-scaled tensor cores (sm_100); use gpu='b200', 'cpu' or 'exact'"

#: The named stacks of ``gpu=``: name -> :class:`Stack`.
STACKS = {
    "h100": Stack(
        "h100", "Hopper cuBLASLt: split accumulator (promotion every 128) or fast accumulation "
        "per pass as the recipe chooses; bf16 activations and outputs",
        "hopper", "hopper-fast", block_fp8="hopper",
        refusals=(("mx", "MXFP8 " + _NO_BLOCK_TC), ("nvfp4", "NVFP4 " + _NO_BLOCK_TC))),
    "h100-fast": Stack(
        "h100-fast", "Hopper cuBLASLt with fast accumulation in every pass; bf16",
        "hopper-fast", "hopper-fast",
        refusals=(("fp8-block", "1x128/128x128 block scaling requires the split accumulator "
                   "(TE's Float8BlockScaling asserts use_split_accumulator=True); use gpu='h100'"),
                  ("mx", "MXFP8 " + _NO_BLOCK_TC), ("nvfp4", "NVFP4 " + _NO_BLOCK_TC))),
    "b200": Stack(
        "b200", "Blackwell tcgen05: kind::f8f6f4 for per-tensor FP8, kind::mxf8f6f4 / "
        "kind::mxf4nvf4 block-scaled for MXFP8 / NVFP4, and for 1x128 / 128x128 block FP8 "
        "(power-of-two scales as UE8M0, each 128-block scale in four 32-element slots); bf16",
        BLACKWELL_FP8, BLACKWELL_FP8, block_fp8=BLACKWELL_MXF8, mx=BLACKWELL_MXF8,
        nvfp4="blackwell-tcgen05-mxf4nvf4", block_fp8_mx=True,
        k_multiples=(("fp8", 32), ("fp8-block", 32), ("mx", 32), ("nvfp4", 64))),
    "cpu": Stack(
        "cpu", "torch's CPU _scaled_mm for per-tensor / row-wise FP8 (its oneDNN or emulated path, "
        "as torch chooses); torchao recipes as Float8Linear(emulate=True); block-scaled FP8, MXFP8 "
        "and NVFP4 (no CPU _scaled_mm) with fp32 accumulation; float32",
        CPU_ACCUMULATOR, CPU_ACCUMULATOR, block_fp8="fp32", mx="fp32", nvfp4="fp32",
        dtype="float32", torchao="torchao-emulate"),
    "exact": Stack(
        "exact", "exact sums rounded once to float32 (reference); float32",
        "exact", "exact", block_fp8="exact", mx="exact", nvfp4="exact", dtype="float32"),
}


def stack_names() -> list:
    """Names accepted by ``gpu=``.

    Examples
    --------
    >>> stack_names()
    ['h100', 'h100-fast', 'b200', 'cpu', 'exact']
    """
    return list(STACKS)


def get_stack(gpu) -> Stack:
    """A :class:`Stack` from its name (a key of :data:`STACKS`) or itself.

    Examples
    --------
    >>> get_stack("cpu").split == CPU_ACCUMULATOR, get_stack("exact") is STACKS["exact"]
    (True, True)
    """
    if isinstance(gpu, Stack):
        return gpu
    if isinstance(gpu, str) and gpu in STACKS:
        return STACKS[gpu]
    raise ValueError(f"unknown gpu {gpu!r}; accepted: {', '.join(STACKS)} or an fp8emu.training.Stack")
