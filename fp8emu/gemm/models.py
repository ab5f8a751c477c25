"""The GEMM models by name: a catalogue row (the step arithmetic) plus a kernel policy (the schedule).

Every ``accumulator=`` of :func:`fp8emu.scaled_mm`, :func:`fp8emu.block_scaled_mm`, the attention
recipes and the lab studies is looked up here (:func:`get_model`).  A tensor-core model is a row of
:data:`fp8emu.gemm.catalogue.INSTRUCTIONS` (what one fused step computes, evaluated by
:mod:`fp8emu.gemm.datapaths` and its fast routes) and a :class:`Policy`: how often the step chain is
promoted into a float32 accumulator, how K is split, where block scales apply and whose Inf/NaN
rules the result follows.  ``"hopper"`` is ``hopper-wgmma`` promoted every 4 steps with cuBLAS's
split-K; ``"hopper-fast"`` the same chain never promoted; ``"blackwell"`` ``blackwell-mma``'s step
with the block scales carried by every product.  ``"exact"`` and ``"fp32"`` are no tensor core (one
rounding; sequential float32 additions), the ``torch-cpu-*`` models torch's own CPU paths
(:mod:`fp8emu.gemm.torch_cpu`).

Step widths no catalogue row states (an :class:`~fp8emu.gemm.accumulator.Accumulator` of other
widths) are Hopper's row with the step, fraction bits and result rounding (``"rz-e8mN"`` /
``"rne-e8mN"``: any width) changed; results wider than float32's, and operands whose products
leave float32's range, take the row's form of unbounded exponents, its results held in float64
(:func:`wide_row`, evaluated by the reference steps).  Only a
:class:`~fp8emu.gemm.accumulator.BlockScaledAccumulator` (block scales carried by products of
any scale kind and block, or applied per K block) is still a model of kind ``"steps"``, evaluated
by :mod:`fp8emu.gemm.kernels`.

Examples
--------
>>> list(MODELS)[:5]
['exact', 'fp32', 'hopper-fast', 'hopper', 'blackwell']
>>> m = get_model("hopper")
>>> m.instruction.name, m.policy.promote, m.policy.split_k
('hopper-wgmma', 4, 'cublas')
>>> get_model("hopper-wgmma").policy == Policy(specials="instruction")
True
>>> get_model(Accumulator("mma", 32, 13, 14, "rtz", promote=4)).instruction.name   # a row says it
'hopper-wgmma'
>>> get_model(Accumulator("mma", 32, 20, 22, "rne")).instruction.rounding         # no preset does
'rne-e8m21'
>>> get_model(Accumulator("mma", 32, 30, 30, "rne")).instruction.out              # wider than float32
'float64'
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .accumulator import Accumulator, BlockScaledAccumulator, split_bounds, split_pieces
from .catalogue import INSTRUCTIONS, Instruction
from .fparith import add_scaled_f32
from .instructions import gemm as instruction_gemm
from .outputs import kept_bits, nearest
from .torch_cpu import TORCH_CPU_PATHS

__all__ = ["Policy", "GemmModel", "MODELS", "get_model", "widths", "wide_row", "row_for_formats",
           "block_steps", "run_steps"]

_KINDS = ("instruction", "steps", "exact", "fp32", "torch-cpu")


@dataclasses.dataclass(frozen=True)
class Policy:
    """How a kernel schedules a chain of one instruction along K.

    Parameters
    ----------
    promote : int or None
        Steps after which the chain's partial sum is added into a float32 accumulator (round to
        nearest even) and restarted from zero; ``None`` never promotes.  Block scales of
        ``scaled_mm`` (1x128 / 128x128) promote every 128 of K whatever this says.
    split_k : int, "cublas" or None
        K cut into this many contiguous pieces of whole 128-wide K-tiles, each reduced from zero,
        their float32 results added in order; ``"cublas"``: :func:`cublas_split_k`'s count.
    scale_at : {None, "product", "block"}
        Block-scaled (MX / NVFP4) models: the scales join every product before alignment, or
        multiply each K-block's partial sum as it joins a float32 accumulator; ``None``: a model
        of :func:`fp8emu.scaled_mm`'s FP8 GEMMs.
    specials : {"ieee", "instruction"}
        Inf/NaN operands: IEEE results (as cuBLAS's FP8 GEMMs), or the instruction's own.

    Examples
    --------
    >>> Policy(promote=4).splits(32, 32, 16384), Policy(split_k="cublas").splits(32, 32, 16384)
    (1, 6)
    """

    promote: int | None = None
    split_k: int | str | None = None
    scale_at: str | None = None
    specials: str = "ieee"

    def __post_init__(self):
        if self.promote is not None and (not isinstance(self.promote, (int, np.integer)) or isinstance(
                self.promote, bool) or self.promote < 1):
            raise ValueError(f"Policy promote must be None or a positive integer, got {self.promote!r}")
        sk = self.split_k
        if not (sk is None or sk == "cublas"
                or (isinstance(sk, (int, np.integer)) and not isinstance(sk, bool) and sk >= 1)):
            raise ValueError(f"Policy split_k must be None, 'cublas' or a positive integer, got {sk!r}")
        if self.scale_at not in (None, "product", "block"):
            raise ValueError(f"Policy scale_at must be None, 'product' or 'block', got {self.scale_at!r}")
        if self.specials not in ("ieee", "instruction"):
            raise ValueError(f"Policy specials must be 'ieee' or 'instruction', got {self.specials!r}")

    def splits(self, M, N, K):
        """Number of split-K pieces for an M x K by K x N product."""
        return split_pieces(self.split_k, M, N, K)


@dataclasses.dataclass(frozen=True)
class GemmModel:
    """One GEMM model: what sums the K products, and how the kernel schedules it.

    Parameters
    ----------
    name : str
    kind : {"instruction", "steps", "exact", "fp32", "torch-cpu"}
        ``"instruction"``: a chain of ``instruction`` (a catalogue row) under ``policy``;
        ``"steps"``: a :class:`BlockScaledAccumulator`'s steps (``steps``, run by the kernels);
        ``"exact"``: the exact sum rounded once; ``"fp32"``: float32 additions in K order;
        ``"torch-cpu"``: torch's CPU ``_scaled_mm`` path ``name``.
    instruction : Instruction or None
    policy : Policy
    steps : BlockScaledAccumulator or None
        ``"steps"`` models: the step widths (group, fraction bits, result bits and rounding).

    Examples
    --------
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> ada = GemmModel("ada-promoted", "instruction", get_instruction("ada-mma"), Policy(promote=8))
    >>> ada.instruction.step * ada.policy.promote          # products between two promotions
    128
    """

    name: str
    kind: str
    instruction: Instruction | None = None
    policy: Policy = Policy()
    steps: BlockScaledAccumulator | None = None

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"GemmModel kind must be one of {_KINDS}, got {self.kind!r}")
        if (self.kind == "instruction") != (self.instruction is not None):
            raise ValueError("an 'instruction' model names its instruction, and only it does")


def _ins(name, **policy):
    return GemmModel(name, "instruction", INSTRUCTIONS[name], Policy(specials="instruction", **policy))


#: The named models (and, by name, every float32-output row of the catalogue, as a plain chain).
MODELS = {m.name: m for m in [
    GemmModel("exact", "exact"),
    GemmModel("fp32", "fp32"),
    GemmModel("hopper-fast", "instruction", INSTRUCTIONS["hopper-wgmma"], Policy(split_k="cublas")),
    GemmModel("hopper", "instruction", INSTRUCTIONS["hopper-wgmma"], Policy(promote=4, split_k="cublas")),
    GemmModel("blackwell", "instruction", INSTRUCTIONS["blackwell-mma"], Policy(scale_at="product")),
    *(GemmModel(p, "torch-cpu") for p in TORCH_CPU_PATHS),
]}

def widths(ins: Instruction):
    """(group, frac_bits, sum_bits, sum_rounding) of a float32-output ``"fused"`` row's step.

    Examples
    --------
    >>> widths(INSTRUCTIONS["hopper-wgmma"]), widths(INSTRUCTIONS["blackwell-mma"])
    ((32, 13, 14, 'rtz'), (32, 31, 24, 'rne'))
    """
    return ins.step, ins.frac_bits, kept_bits(ins) + 1, "rne" if nearest(ins) else "rtz"


#: Rows tried first when an Accumulator's widths name one (several rows share one step).
_PREFERRED = ("hopper-wgmma", "blackwell-mma", "blackwell-tcgen05-f8f6f4", "ada-mma")


#: The exponent a zero term carries in the rows of step widths no instruction has: below every
#: product of operands of at most 8 bits, so that, as in a datapath of unbounded exponents, a zero
#: never sets a step's alignment.
_NO_ZERO_EXP = -900


def _row_for(group, frac_bits, sum_bits, rounding, name):
    """The FP8 ``"fused"`` float32 row whose step has these widths: the catalogue's where one states
    them, else Hopper's row with these widths (:func:`wide_row` where the result keeps more bits than
    float32's)."""
    for ins in [INSTRUCTIONS[n] for n in _PREFERRED] + list(INSTRUCTIONS.values()):
        if (ins.datapath == "fused" and ins.out == "float32" and "e4m3fn" in ins.formats and "e5m2" in ins.formats
                and widths(ins) == (group, frac_bits, sum_bits, rounding)):
            return ins
    mode = "rz" if rounding == "rtz" else "rne"
    row = dataclasses.replace(INSTRUCTIONS["hopper-wgmma"], name=name, shape=(64, 8, group), step=group,
                              frac_bits=frac_bits, rounding=f"{mode}-e8m{min(sum_bits, 24) - 1}",
                              model=f"step widths {(group, frac_bits, sum_bits, rounding)}")
    return row if sum_bits <= 24 else wide_row(row, sum_bits)


def wide_row(ins: Instruction, sum_bits=None, formats=None):
    """The float32 ``"fused"`` row ``ins`` with exponents unbounded: its steps' results (of
    ``sum_bits`` significant bits, default its own) held in float64, below float32's normal range
    on float32's grid of that width, a zero term never setting the alignment, no overflow; what
    the step computes for operands whose products leave float32's range (``formats``: the row then
    takes them).

    Examples
    --------
    >>> w = wide_row(INSTRUCTIONS["hopper-wgmma"])
    >>> w.out, w.rounding, w.zero_exp, widths(w) == widths(INSTRUCTIONS["hopper-wgmma"])
    ('float64', 'rz-e8m13', -900, True)
    """
    if ins.datapath != "fused" or ins.out == "float16":
        raise ValueError(f"{ins.name} ({ins.datapath} datapath, {ins.out} output) has no form of unbounded "
                         f"exponents: only float32-output 'fused' rows do")
    bits = kept_bits(ins) + 1 if sum_bits is None else sum_bits
    mode = "rne" if nearest(ins) else "rz"
    return dataclasses.replace(ins, out="float64", rounding=f"{mode}-e8m{bits - 1}", zero_exp=_NO_ZERO_EXP,
                               formats=ins.formats if formats is None else formats)


def get_model(acc) -> GemmModel:
    """The :class:`GemmModel` an ``accumulator=`` argument names: the one lookup of every GEMM entry.

    Parameters
    ----------
    acc : str, GemmModel, Instruction, Accumulator or BlockScaledAccumulator
        A name of :data:`MODELS`, a catalogue instruction (name or row: a chain of it along K, its
        own Inf/NaN results), or a model object.

    Examples
    --------
    >>> get_model("fp32").kind, get_model("torch-cpu-onednn").kind
    ('fp32', 'torch-cpu')
    >>> get_model("blackwell").instruction.frac_bits
    31
    """
    if isinstance(acc, GemmModel):
        return acc
    if isinstance(acc, str):
        if acc in MODELS:
            return MODELS[acc]
        if acc in INSTRUCTIONS:
            return _ins(acc)
    if isinstance(acc, Instruction):
        return GemmModel(acc.name, "instruction", acc, Policy(specials="instruction"))
    if isinstance(acc, Accumulator):
        if acc.kind != "mma":
            return GemmModel(acc.name, acc.kind)
        row = _row_for(acc.group, acc.frac_bits, acc.sum_bits, acc.sum_rounding, acc.name)
        return GemmModel(acc.name, "instruction", row, Policy(promote=acc.promote, split_k=acc.split_k))
    if isinstance(acc, BlockScaledAccumulator):
        return GemmModel(acc.name, "steps", None, Policy(scale_at=acc.scale_at), acc)
    names = sorted(MODELS) + ["a float32-output instruction preset such as 'hopper-wgmma'"]
    raise ValueError(f"unknown accumulator {acc!r}; use one of {names} (fp8emu.gemm.presets() lists the "
                     f"instructions), or an fp8emu.gemm.GemmModel / Accumulator")


def row_for_formats(model: GemmModel, fa, fb, K):
    """The model's row, taking operands of formats ``fa`` and ``fb`` (Formats) along ``K``.

    A named tensor-core model (``"hopper"``) takes any format of at most 8 bits, the row a few: its
    arithmetic is the model's as long as no product lies below float32's normal range or near the
    row's zero exponent (``zero_exp``, where a zero term could win the alignment) and no partial sum
    nears float32's overflow; there the row, with the formats added, is the model, elsewhere the
    row of unbounded exponents (:func:`wide_row`).

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> row_for_formats(get_model("hopper"), get_format("e2m1fn"), get_format("e2m1fn"), 64).formats
    ('e2m1fn',)
    >>> row_for_formats(get_model("hopper"), get_format("e8m0fnu"), get_format("e4m3fn"), 64).out
    'float64'
    """
    ins = model.instruction
    if model.policy.specials == "instruction" or (fa.name in ins.formats and fb.name in ins.formats):
        return ins
    lo = float(fa.min_subnormal) * float(fb.min_subnormal)
    hi = float(fa.max) * float(fb.max) * max(1, K)
    formats = tuple(dict.fromkeys((fa.name, fb.name)))
    if lo < 2.0 ** -126 or hi >= 2.0 ** 120 or ins.zero_exp > -127:
        return wide_row(ins, formats=formats)
    return dataclasses.replace(ins, formats=formats)


def block_steps(model: GemmModel) -> BlockScaledAccumulator:
    """A block-scaled tensor-core model's step widths and ``scale_at``, as the kernels that evaluate
    steps whose products carry their scales take them (:mod:`fp8emu.gemm.block_scaled`).

    Examples
    --------
    >>> s = block_steps(get_model("blackwell"))
    >>> s.group, s.frac_bits, s.sum_bits, s.sum_rounding, s.scale_at
    (32, 31, 24, 'rne', 'product')
    """
    if model.kind == "steps":
        return model.steps
    return BlockScaledAccumulator(*widths(model.instruction), scale_at=model.policy.scale_at, name=model.name)


def run_steps(model: GemmModel, ca, fa, cb, fb, kscale=None, kblock=128, c=None, ins=None):
    """float32 (M, N) ``A @ B`` of FP8 codes through an ``"instruction"`` model: its row chained
    along K under its policy (split-K pieces, promotion into float32; ``kscale(kb)``: the float64
    (M, N) factor of K block ``kb``, which promotes every ``kblock`` with one rounding, as
    DeepGEMM's FMA does).  ``c``: the accumulator input of the first step (no split-K); ``ins``:
    the row to chain (default the model's; :func:`row_for_formats`).

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.array([[1.0] + [2.0 ** -9] * 255]), "e4m3fn")
    >>> b = fp8emu.encode(np.array([[1.0]] + [[2.0 ** -6]] * 255), "e4m3fn")
    >>> [float(run_steps(get_model(n), a, "e4m3fn", b, "e4m3fn")[0, 0])   # 1 + 255 * 2**-15
    ...  for n in ("hopper-fast", "hopper")]      # the second 128 of K restart from zero: kept
    [1.0, 1.00390625]
    """
    ins, pol = ins or model.instruction, model.policy
    M, K = ca.shape
    N = cb.shape[1]
    bounds = split_bounds(K, pol.splits(M, N, K))
    if c is not None and len(bounds) > 2:
        # where C would join a split-K reduction is not known for any GPU
        raise ValueError("an accumulator input C is modelled without split-K only")
    if len(bounds) > 2 and (bounds[1] - bounds[0]) % ins.step:
        raise ValueError(f"split-K pieces of {bounds[1] - bounds[0]} do not hold whole steps of group {ins.step}")
    # promotion intervals start afresh in each split-K piece
    interval = kblock if kscale is not None else (None if pol.promote is None else pol.promote * ins.step)

    def chain(k0, k1, c_in=None):
        return instruction_gemm(ca[:, k0:k1], cb[k0:k1], instruction=ins, a_format=fa, b_format=fb, c=c_in)

    result = None
    for k0, k1 in zip(bounds[:-1], bounds[1:]):
        if interval is None:
            piece = chain(k0, k1, c).astype(np.float32, copy=False)   # a float64 row's last result
        else:
            piece = np.zeros((M, N), np.float32)
            for j in range(k0, k1, interval):
                part = chain(j, min(k1, j + interval))
                if kscale is None:
                    piece = np.add(piece, part, dtype=np.float32)
                else:
                    piece = add_scaled_f32(piece, part.astype(np.float64), kscale(j // kblock))
        # split-K: the pieces' float32 results are added in piece order
        result = piece if result is None else np.add(result, piece, dtype=np.float32)
    return result
