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

Step widths no catalogue row states are a row too (:func:`step_row`: Hopper's row with the step,
fraction bits and result rounding, ``"rz-e8mN"`` / ``"rne-e8mN"``, changed); results wider than
float32's, and operands whose products leave float32's range, take the row's form of unbounded
exponents, its results held in float64 (:func:`wide_row`).  A block-scaled model
(``Policy(scale_at=...)``) runs its row's form of unbounded exponents too: ``"product"`` as a
``"scaled"`` row whose products carry the block scales of either operand, of any kind and block
(:func:`scaled_row`), ``"block"`` with each K block's chain times its scales joining a float32
accumulator (:func:`fp8emu.gemm.block_scaled_mm`); both evaluated by the wide route
(:mod:`fp8emu.gemm.routes.wide`).

Examples
--------
>>> list(MODELS)[:5]
['exact', 'fp32', 'hopper-fast', 'hopper', 'blackwell']
>>> m = get_model("hopper")
>>> m.instruction.name, m.policy.promote, m.policy.split_k
('hopper-wgmma', 4, 'cublas')
>>> get_model("hopper-wgmma").policy == Policy(specials="instruction")
True
>>> step_row(32, 13, 14, "rtz").name                     # a row states these widths
'hopper-wgmma'
>>> step_row(32, 20, 22, "rne").rounding, step_row(32, 30, 30, "rne").out    # no row does; wider than float32
('rne-e8m21', 'float64')
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..formats import get_format
from ..interop import is_integer
from .catalogue import INSTRUCTIONS, Instruction
from .code_tables import values_and_exponents
from .fparith import add_scaled_f32
from .instructions import gemm as instruction_gemm
from .kernels import exact_dot, fp32_dot
from .outputs import kept_bits, nearest
from .torch_cpu import TORCH_CPU_PATHS

__all__ = ["Policy", "GemmModel", "MODELS", "get_model", "widths", "step_row", "wide_row", "scaled_row",
           "row_for_formats", "run_steps", "cublas_split_k", "split_bounds", "HW_K_MULTIPLE",
           "SPLIT_K_TILE"]

_KINDS = ("instruction", "exact", "fp32", "torch-cpu")

#: cuBLASLt needs K to be a multiple of this for FP8 operands.
HW_K_MULTIPLE = 16
#: K extent of one CTA K-tile of cuBLAS's sm_90 FP8 kernels: split-K pieces are whole tiles.
SPLIT_K_TILE = 128
#: Observed heuristic (see cublas_split_k): the fewest K-tiles cuBLAS gives one split-K piece,
#: the number of SMs of an H200, and the output tile assumed when counting tiles.
_MIN_TILES_PER_SPLIT = 20
_NUM_SMS = 132
_OUT_TILE = 128


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
        their float32 results added in order; ``"cublas"``: :func:`cublas_split_k`'s count.  The
        pieces are ``ceil(tiles / split_k)`` tiles each, the remainder last (:func:`split_bounds`): an
        integer that makes fewer pieces at a K (4 at K = 640, five tiles: 2 + 2 + 1) is refused there.
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
        if self.promote is not None and (not is_integer(self.promote) or self.promote < 1):
            raise ValueError(f"Policy promote must be None or a positive integer, got {self.promote!r}")
        sk = self.split_k
        if not (sk is None or sk == "cublas" or (is_integer(sk) and sk >= 1)):
            raise ValueError(f"Policy split_k must be None, 'cublas' or a positive integer, got {sk!r}")
        # a NumPy integer kept its width: promote=np.uint8(16) times a step of 16 wrapped to 0 products
        for field in ("promote", "split_k"):
            v = getattr(self, field)
            if isinstance(v, np.integer):
                object.__setattr__(self, field, int(v))
        if self.scale_at not in (None, "product", "block"):
            raise ValueError(f"Policy scale_at must be None, 'product' or 'block', got {self.scale_at!r}")
        if self.specials not in ("ieee", "instruction"):
            raise ValueError(f"Policy specials must be 'ieee' or 'instruction', got {self.specials!r}")

    def splits(self, M, N, K):
        """Number of split-K pieces for an M x K by K x N product: ``None`` 1, ``"cublas"``
        :func:`cublas_split_k`'s count for the shape, an integer itself."""
        return 1 if self.split_k is None else cublas_split_k(M, N, K) if self.split_k == "cublas" else self.split_k


@dataclasses.dataclass(frozen=True)
class GemmModel:
    """One GEMM model: what sums the K products, and how the kernel schedules it.

    Parameters
    ----------
    name : str
    kind : {"instruction", "exact", "fp32", "torch-cpu"}
        ``"instruction"``: a chain of ``instruction`` (a catalogue row) under ``policy``;
        ``"exact"``: the exact sum rounded once; ``"fp32"``: float32 additions in K order;
        ``"torch-cpu"``: torch's CPU ``_scaled_mm`` path ``name``.
    instruction : Instruction or None
    policy : Policy

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

    def __post_init__(self):
        # a row's name or a dict was taken here and failed at the first GEMM ("'str' object has no attribute
        # 'block_scaled'")
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"GemmModel name must be a non-empty string, got {self.name!r}")
        if self.instruction is not None and not isinstance(self.instruction, Instruction):
            raise TypeError(f"GemmModel instruction must be an fp8emu.gemm.Instruction (a catalogue row, e.g. "
                            f"fp8emu.gemm.INSTRUCTIONS[name] or fp8emu.step_row(...)) or None, got {self.instruction!r}")
        if not isinstance(self.policy, Policy):
            raise TypeError(f"GemmModel policy must be an fp8emu.Policy, got {self.policy!r}")
        if self.kind not in _KINDS:
            raise ValueError(f"GemmModel kind must be one of {_KINDS}, got {self.kind!r}")
        if (self.kind == "instruction") != (self.instruction is not None):
            raise ValueError("an 'instruction' model names its instruction, and only it does")
        if self.kind != "instruction" and self.policy != Policy():
            raise ValueError(f"a {self.kind!r} model has no steps to schedule: its policy (promote, split_k, "
                             f"scale_at) must be the default, got {self.policy}")


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


#: Rows tried first when step widths name one (several rows share one step).
_PREFERRED = ("hopper-wgmma", "blackwell-mma", "blackwell-tcgen05-f8f6f4", "ada-mma")


#: The exponent a zero term carries in the rows of step widths no instruction has: below every
#: product of operands of at most 8 bits, so that, as in a datapath of unbounded exponents, a zero
#: never sets a step's alignment.
_NO_ZERO_EXP = -900


#: The most products one :func:`step_row` step may sum (the catalogue's steps sum 4 to 128).
MAX_STEP = 4096


def step_row(step, frac_bits, result_bits, rounding="rtz", name="custom"):
    """The FP8 ``"fused"`` float32 row whose step sums ``step`` products aligned to ``frac_bits``
    fraction bits and rounds its result to ``result_bits`` significant bits (``rounding`` "rtz" or
    "rne"): the catalogue's where a row states these widths, else Hopper's row with them
    (:func:`wide_row`, results in float64, where they keep more bits than float32's).  How to model a
    tensor core of other widths: ``GemmModel(name, "instruction", step_row(...), Policy(...))``.

    Examples
    --------
    >>> step_row(32, 31, 24, "rne").name, step_row(16, 13, 14).name
    ('blackwell-mma', 'ada-mma')
    >>> r = step_row(8, 20, 22, "rne", name="odd")
    >>> r.name, widths(r)
    ('odd', (8, 20, 22, 'rne'))
    >>> step_row(16, 13, 14, name="mine").name       # a catalogue row's widths, under the name given
    'mine'
    """
    for field, v in (("step", step), ("frac_bits", frac_bits), ("result_bits", result_bits)):
        if not is_integer(v) or v < 1:
            raise ValueError(f"step_row {field} must be a positive integer, got {v!r}")
    step, frac_bits, result_bits = int(step), int(frac_bits), int(result_bits)   # np.uint8(255) wrapped padding K
    if step > MAX_STEP:    # 2**40 was taken, and the first GEMM asked NumPy for terabytes
        raise ValueError(f"step_row step must be at most {MAX_STEP} products (tensor-core steps sum 4 to 128), "
                         f"got {step}")
    if frac_bits > 40 or result_bits > 40:
        raise ValueError("step_row frac_bits and result_bits must be at most 40 (exact in float64 up to there)")
    if rounding not in ("rtz", "rne"):
        raise ValueError(f"step_row rounding must be 'rtz' or 'rne', got {rounding!r}")
    if not isinstance(name, str) or not name:   # None was "GemmModel name must be ..." at the first GEMM
        raise TypeError(f"step_row name must be a non-empty string, got {name!r}")
    for ins in [INSTRUCTIONS[n] for n in _PREFERRED] + list(INSTRUCTIONS.values()):
        if (ins.datapath == "fused" and ins.out == "float32" and "e4m3fn" in ins.formats and "e5m2" in ins.formats
                and widths(ins) == (step, frac_bits, result_bits, rounding)):
            # the catalogue's row, under the name given (name="mine" came back as "ada-mma", the name dropped)
            return ins if name == "custom" else dataclasses.replace(ins, name=name)
    mode = "rz" if rounding == "rtz" else "rne"
    row = dataclasses.replace(INSTRUCTIONS["hopper-wgmma"], name=name, shape=(64, 8, step), step=step,
                              frac_bits=frac_bits, rounding=f"{mode}-e8m{min(result_bits, 24) - 1}",
                              model=f"step widths {(step, frac_bits, result_bits, rounding)}")
    return row if result_bits <= 24 else wide_row(row, result_bits)


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
    acc : str, GemmModel or Instruction
        A name of :data:`MODELS`, a catalogue instruction (name or row: a chain of it along K, its
        own Inf/NaN results), or a model (a row and a :class:`Policy`).

    Examples
    --------
    >>> get_model("fp32").kind, get_model("torch-cpu-onednn").kind
    ('fp32', 'torch-cpu')
    >>> get_model("blackwell").instruction.frac_bits
    31
    """
    if isinstance(acc, GemmModel):
        return acc
    if isinstance(acc, str) and acc in MODELS:
        return MODELS[acc]
    if isinstance(acc, str) and acc in INSTRUCTIONS:
        acc = INSTRUCTIONS[acc]
    if isinstance(acc, Instruction):
        return GemmModel(acc.name, "instruction", acc, Policy(specials="instruction"))
    names = sorted(MODELS) + ["a float32-output instruction preset such as 'hopper-wgmma'"]
    raise ValueError(f"unknown accumulator {acc!r}; use one of {names} (fp8emu.gemm.presets() lists the "
                     f"instructions), or an fp8emu.gemm.GemmModel (a row, e.g. fp8emu.gemm.step_row(...), and a Policy)")


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


def scaled_row(ins: Instruction, formats=None):
    """The ``"scaled"`` form of unbounded exponents (:func:`wide_row`) of a ``"fused"`` row: every
    product carries the block scales of its two operands (of any kind: the scales' exponents are
    ``floor(log2 s)``, unbounded too; a zero scale's product is a zero term), as a block-scaled model
    with ``Policy(scale_at="product")`` runs it.

    Examples
    --------
    >>> r = scaled_row(INSTRUCTIONS["blackwell-mma"])
    >>> r.datapath, r.out, r.rounding, r.scales, r.blocks
    ('scaled', 'float64', 'rne-e8m23', ('ue8m0', 'ue4m3', 'ue5m3'), (16, 32))
    """
    w = wide_row(ins, formats=formats)
    return dataclasses.replace(w, datapath="scaled", scales=("ue8m0", "ue4m3", "ue5m3"), blocks=(16, 32), modes=())


def run_steps(model: GemmModel, ca, fa, cb, fb, kscale=None, kblock=128, c=None, ins=None, values=None):
    """float32 (M, N) ``A @ B`` of FP8 codes through an ``"instruction"`` model: its row chained
    along K under its policy (an ``"exact"`` or ``"fp32"`` model: its sum of the decoded values in
    place of the chain) (split-K pieces, promotion into float32; ``kscale(kb)``: the float64
    (M, N) factor of K block ``kb``, which promotes every ``kblock`` with one rounding, as
    DeepGEMM's FMA does).  ``c``: the accumulator input of the first step (no split-K, no promotion); ``ins``:
    the row to chain (default the model's; :func:`row_for_formats`).  ``values``: an ``"exact"`` or ``"fp32"``
    model's decoded operands, ``(values_and_exponents(ca, fa), values_and_exponents(cb, fb))``, where the caller
    holds them.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.array([[1.0] + [2.0 ** -9] * 255]), "e4m3fn")
    >>> b = fp8emu.encode(np.array([[1.0]] + [[2.0 ** -6]] * 255), "e4m3fn")
    >>> [float(run_steps(get_model(n), a, "e4m3fn", b, "e4m3fn")[0, 0])   # 1 + 255 * 2**-15
    ...  for n in ("hopper-fast", "hopper")]      # the second 128 of K restart from zero: kept
    [1.0, 1.00390625]
    """
    if values is not None and model.kind not in ("exact", "fp32"):
        # an instruction's chain reads the codes: the values would be ignored, silently
        raise ValueError(f"values are the decoded operands of an 'exact' or 'fp32' model's sum; {model.name!r} chains "
                         "its instruction on the codes")
    ins, pol = ins or model.instruction, model.policy
    M, K = ca.shape
    N = cb.shape[1]
    bounds = split_bounds(K, pol.splits(M, N, K))
    if c is not None and len(bounds) > 2:
        # where C would join a split-K reduction is not known for any GPU
        raise ValueError("an accumulator input C is modelled without split-K only")
    if len(bounds) > 2 and (bounds[1] - bounds[0]) % ins.step:
        raise ValueError(f"split-K pieces of {bounds[1] - bounds[0]} do not hold whole steps of group {ins.step}")
    if is_integer(pol.split_k) and K > 0 and len(bounds) - 1 != pol.split_k:
        # the rule's equal pieces of whole K-tiles make fewer pieces than asked here: run as asked or not at all
        tiles = -(-K // SPLIT_K_TILE)
        raise ValueError(f"{model.name!r}: Policy split_k={pol.split_k} cannot cut K = {K} ({tiles} K-tile(s) of "
                         f"{SPLIT_K_TILE}) into {pol.split_k} pieces: pieces are ceil({tiles} / {pol.split_k}) whole "
                         f"K-tiles, the remainder last, which makes {len(bounds) - 1}; give a split_k that makes its "
                         "count at this K, or None")
    # promotion intervals start afresh in each split-K piece
    interval = kblock if kscale is not None else (None if pol.promote is None else pol.promote * ins.step)
    if c is not None and interval is not None:
        # each interval's chain starts from zero: C was left out of the sum, silently
        raise ValueError("an accumulator input C is modelled without promotion (and without block scales) only")

    if model.kind == "instruction":
        def chain(k0, k1, c_in=None):
            return instruction_gemm(ca[:, k0:k1], cb[k0:k1], instruction=ins, a_format=fa, b_format=fb, c=c_in)
    elif model.kind == "torch-cpu":
        raise ValueError(f"{model.name!r} is torch's CPU _scaled_mm, not a sum along K: use fp8emu.scaled_mm")
    else:
        fa, fb = get_format(fa), get_format(fb)
        (va, ea), (vb, eb) = values or (values_and_exponents(ca, fa), values_and_exponents(cb, fb))

        def chain(k0, k1, c_in=None):
            if model.kind == "fp32":
                return fp32_dot(va[:, k0:k1], vb[k0:k1], c_in)
            return exact_dot(va[:, k0:k1], ea[:, k0:k1], vb[k0:k1], eb[k0:k1], fa.mbits, fb.mbits, extra=c_in)

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


def cublas_split_k(M, N, K):
    """Split-K count cuBLASLt (CUDA 13.0, H200) is assumed to choose for an FP8 GEMM.

    Observed (``torch._scaled_mm``, M = N = 32, both ``use_fast_accum``
    settings): no split for K <= 4096, and at K = 16384 six pieces of 22
    K-tiles (K = 2816) with the last of 18.  Every other contiguous split
    (2-16 pieces, remainder first or last) matches at most 2% of those outputs.
    The rule below is the simplest one consistent with that: as many pieces as
    give each at least 20 K-tiles of 128 (so 8192 -> 3), and no more pieces
    than fit next to the output tiles (assumed 128 x 128) on the 132 SMs.  Both
    limits are *assumptions* outside the recorded shapes; pass an integer
    ``split_k`` to :class:`Policy` to model another choice.

    Parameters
    ----------
    M, N, K : int
        Problem shape.

    Returns
    -------
    int
        Number of pieces (1 = no split): those :func:`split_bounds` cuts for the rule's count, which
        can be one or more fewer than it.

    Examples
    --------
    >>> cublas_split_k(32, 32, 4096), cublas_split_k(32, 32, 16384)
    (1, 6)
    """
    if not all(is_integer(v) and v >= 0 for v in (M, N, K)):    # int() truncated 2.7e4, parsed "16384"
        raise ValueError(f"cublas_split_k: M, N, K must be non-negative integers, got {M!r}, {N!r}, {K!r}")
    k_tiles = -(-int(K) // SPLIT_K_TILE)
    tiles = -(-int(M) // _OUT_TILE) * -(-int(N) // _OUT_TILE)
    s = max(1, min(k_tiles // _MIN_TILES_PER_SPLIT, _NUM_SMS // max(1, tiles)))
    # pieces of ceil(k_tiles / s) whole K-tiles can be fewer than s (441 tiles, s = 22: 21 pieces of 21):
    # the count returned is the one the pieces make, so that what is reported is what runs
    return len(split_bounds(K, s)) - 1 if K > 0 else 1


def split_bounds(K, splits):
    """K offsets bounding the split-K pieces: whole 128-wide K-tiles, remainder last.

    Examples
    --------
    >>> split_bounds(16384, 6)
    [0, 2816, 5632, 8448, 11264, 14080, 16384]
    >>> split_bounds(4096, 1)
    [0, 4096]
    """
    if not is_integer(K) or K < 0 or not is_integer(splits):     # splits 2.5 made 2 pieces, True 1
        raise ValueError(f"split_bounds: K must be a non-negative integer and splits a positive integer, got "
                         f"{K!r}, {splits!r}")
    if int(splits) < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    k_tiles = -(-int(K) // SPLIT_K_TILE)
    per = -(-k_tiles // int(splits)) * SPLIT_K_TILE
    return list(range(0, K, per))[:int(splits)] + [K] if K > 0 else [0, 0]
