"""The catalogue of matrix instructions, as data: one :class:`Instruction` row per instruction.

A row says which datapath the instruction uses (what the datapath computes is stated in
:mod:`fp8emu.gemm.datapaths`), its shape, operand formats, output type, how many products one
fused step sums, how many fraction bits the alignment keeps, how a step's result is rounded, which
exponent a zero term carries and, for block-scaled kinds, the scale types and blocks.
:data:`EVIDENCE` holds what stands behind each row (public GPU recordings reproduced, random MMAs
equal to MMA-Sim, or model only).

A new preset is a new row of :data:`INSTRUCTIONS` (and, where its arithmetic is new, a new datapath
in :mod:`fp8emu.gemm.datapaths`); :func:`fp8emu.gemm.instructions.mma` runs any row.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..registry import named
from .outputs import OUTPUT_TYPES

__all__ = ["Instruction", "INSTRUCTIONS", "EVIDENCE", "get_instruction", "presets"]

_DATAPATHS = ("fused", "scaled", "grouped", "paired")
_ROUNDINGS = ("rz-e8m13", "rz", "rne")
#: Any width of a result with float32's exponent range: ``"rz-e8mN"`` / ``"rne-e8mN"``, N fraction bits
#: (0..23; up to 39 held in a float64 output, step widths no instruction has).
_WIDE_ROUNDING = re.compile(r"(rz|rne)-e8m([0-9]|[1-3][0-9])")
#: Block-scale types (their decode: :func:`fp8emu.gemm.instruction_inputs.scale_values`).
_SCALES = ("ue8m0", "ue4m3", "ue5m3")
_FP8 = ("e4m3fn", "e5m2")
_F8F6F4 = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One matrix instruction: its shape, operand types and datapath (see :mod:`fp8emu.gemm.datapaths`).

    Parameters
    ----------
    name : str
        Catalogue key.
    arch : str
        Architecture (as MMA-Sim names it).
    ptx : str
        The instruction as written in PTX / the AMD ISA (``{a}``/``{b}`` stand for the operand types).
    shape : tuple of int
        ``(m, n, k)`` of one instruction.
    formats : tuple of str
        fp8emu element formats accepted for A and B.
    out : {"float32", "float16", "float64"}
        Type of C and D (``"float64"``: no instruction's; results of step widths no instruction
        has, wider than float32's or with exponents below its range, see :mod:`fp8emu.gemm.models`).
    datapath : {"fused", "scaled", "grouped", "paired"}
    step : int
        Products summed by one fused step (a K longer than this is a chain of steps).
    frac_bits : int
        Fraction bits kept when a step's terms are aligned to its largest exponent.
    rounding : {"rz-e8m13", "rz", "rne"} or "rz-e8mN" / "rne-e8mN"
        How a step's exact sum becomes the output: ``"rz"`` / ``"rne"`` to the output type, the
        ``e8mN`` forms to N fraction bits with float32's exponent range (N = 0..23; up to 39 with
        the float64 output that carries step results wider than float32's).
    zero_exp : int
        Exponent carried by a zero term.
    group : int
        ``"grouped"``: products summed exactly before scaling.
    pair_bits : int
        ``"paired"``: significant bits of the floored sum.
    scales : tuple of str
        Block-scaled kinds: accepted scale formats (``"ue8m0"``, ``"ue4m3"``, ``"ue5m3"``).
    blocks : tuple of int
        Block-scaled kinds: accepted K blocks per scale.
    modes : tuple of (str, int)
        Block-scaled kinds: the (scale format, block) pairs the instruction takes, where not every
        pairing of ``scales`` and ``blocks`` is one (Blackwell's ``kind::mxf4nvf4``: UE4M3 with
        blocks of 16 only); empty: every pairing.
    model : str
        Where the description comes from.

    Examples
    --------
    >>> get_instruction("ada-mma").step, get_instruction("ada-mma").frac_bits
    (16, 13)
    """

    name: str
    arch: str
    ptx: str
    shape: tuple
    formats: tuple
    out: str
    datapath: str
    step: int
    frac_bits: int
    rounding: str
    zero_exp: int
    group: int = 16
    pair_bits: int = 31
    scales: tuple = ()
    blocks: tuple = ()
    modes: tuple = ()
    model: str = ""

    def __post_init__(self):
        if self.datapath not in _DATAPATHS:
            raise ValueError(f"Instruction datapath must be one of {_DATAPATHS}, got {self.datapath!r}")
        if self.rounding not in _ROUNDINGS and not _WIDE_ROUNDING.fullmatch(str(self.rounding)):
            raise ValueError(f"Instruction rounding must be one of {_ROUNDINGS} or 'rz-e8mN' / 'rne-e8mN' "
                             f"(N = 0..39), got {self.rounding!r}")
        if self.out not in OUTPUT_TYPES:
            raise ValueError(f"Instruction out must be 'float32' or 'float16' (or 'float64' for wider step "
                             f"results), got {self.out!r}")
        wide = self.out == "float64"
        if "-e8m" in self.rounding and self.out == "float16":
            raise ValueError(f"rounding {self.rounding!r} needs a float32 output (or a float64 one, for step "
                             f"results wider than float32's)")
        if "-e8m" in self.rounding and int(self.rounding.partition("-e8m")[2]) > (39 if wide else 23):
            raise ValueError(f"rounding {self.rounding!r} keeps more fraction bits than its output "
                             f"{self.out} (at most {39 if wide else 23})")
        if wide and "-e8m" not in self.rounding:
            raise ValueError(f"a float64 output takes an 'rz-e8mN' / 'rne-e8mN' rounding, got {self.rounding!r}")
        for field in ("step", "frac_bits", "group", "pair_bits"):
            v = getattr(self, field)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"Instruction {field} must be a positive integer, got {v!r}")
        if self.frac_bits > 40:
            raise ValueError("Instruction frac_bits must be at most 40 (exact in float64 up to there)")
        if self.shape[2] % self.step:
            raise ValueError(f"Instruction k ({self.shape[2]}) must be a multiple of its step ({self.step})")
        if (self.datapath in ("scaled", "grouped")) != bool(self.scales):
            raise ValueError("block scales go with the 'scaled' and 'grouped' datapaths only")
        if self.datapath == "grouped" and any(b % self.group for b in self.blocks):
            raise ValueError("a 'grouped' instruction's blocks must be multiples of its group")
        for kind in self.scales:
            if kind not in _SCALES:
                raise ValueError(f"Instruction scales must be among {_SCALES}, got {kind!r}")
        for mode in self.modes:
            if not (isinstance(mode, tuple) and len(mode) == 2 and mode[0] in self.scales and mode[1] in self.blocks):
                raise ValueError(f"Instruction modes must be (scale, block) pairs of its scales {self.scales} and "
                                 f"blocks {self.blocks}, got {mode!r}")

    @property
    def scale_modes(self) -> tuple:
        """The (scale format, block) pairs a block-scaled instruction takes (``modes``, or every
        pairing of ``scales`` and ``blocks``).

        Examples
        --------
        >>> get_instruction("blackwell-tcgen05-mxf4nvf4").scale_modes
        (('ue8m0', 16), ('ue8m0', 32), ('ue4m3', 16))
        """
        return self.modes or tuple((k, b) for k in self.scales for b in self.blocks)

    @property
    def block_scaled(self) -> bool:
        """Whether the instruction takes block scales."""
        return bool(self.scales)


_i = Instruction


_MMASIM = "MMA-Sim 2.1.1 model"


def _sixteen_bit():
    """The fp16/bf16/tf32-input ``mma.sync`` of each NVIDIA generation (MMA-Sim's parameters:
    fraction bits 23/24/25 for Volta/Ampere-Ada/Hopper-Blackwell, one step per 8/16/32 bytes of
    operands, a truncated float32 or a nearest-even float16 result)."""
    gens = [("volta", "Volta", 23, 8, -131, -19, (("float16", 4),)),
            ("ampere", "Ampere", 24, 16, -132, -20, (("float16", 8), ("bfloat16", 8), ("tf32", 4))),
            ("ada", "Ada Lovelace", 24, 16, -132, -20, (("float16", 8), ("bfloat16", 8), ("tf32", 4))),
            ("hopper", "Hopper", 25, 32, -133, -21, (("float16", 16), ("bfloat16", 16), ("tf32", 4))),
            ("blackwell", "Blackwell", 25, 32, -133, -21, (("float16", 16), ("bfloat16", 16), ("tf32", 4)))]
    short = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}
    out = []
    for key, arch, F, nbytes, z32, z16, kinds in gens:
        for fmt, k in kinds:
            step = min(k, nbytes // (4 if fmt == "tf32" else 2))
            shape = (8, 8, 4) if key == "volta" else (16, 8, k)
            t = short[fmt]
            ptx = f"mma.sync.aligned.m{shape[0]}n{shape[1]}k{k}.row.col.{{d}}.{t}.{t}.{{d}}"
            out.append(_i(f"{key}-mma-{t}in", arch, ptx.format(d="f32"), shape, (fmt,), "float32", "fused", step,
                          F, "rz", z32, model=_MMASIM))
            if fmt == "float16":
                out.append(_i(f"{key}-mma-{t}in-f16", arch, ptx.format(d="f16"), shape, (fmt,), "float16", "fused",
                              step, F, "rne", z16, model=_MMASIM))
    return out
_FIT = "fitted to the B200 recordings"
#: Blackwell ``kind::mxf4nvf4``: ``scale_vec::2X`` (UE8M0 per 32) and ``scale_vec::4X`` (UE8M0 or UE4M3
#: per 16).
_NVF4_MODES = (("ue8m0", 16), ("ue8m0", 32), ("ue4m3", 16))
#: Rubin's FP4 block-scaled MMA: every scale type with vectors of 16 and of 32.
_RUBIN_MODES = tuple((k, b) for k in ("ue5m3", "ue4m3", "ue8m0") for b in (16, 32))
_RUBIN = ("model only: Blackwell's tcgen05 kind::mxf4nvf4 datapath (MMA-Sim 2.1.1's model, the closest recorded "
          "one: products summed exactly in groups of 16, each group sum times its two scales aligned on the "
          "scales' exponents with 35 fraction bits, result truncated), with UE5M3 scales decoded as ml_dtypes "
          "0.7's float8_e5m3fnu; no public Rubin recording or description of the accumulation")
#: The catalogue: every instruction modelled, keyed by name.
INSTRUCTIONS = {i.name: i for i in [
    _i("ada-mma", "Ada Lovelace", "mma.sync.aligned.m16n8k32.row.col.f32.{a}.{b}.f32", (16, 8, 32), _FP8,
       "float32", "fused", 16, 13, "rz-e8m13", -132, model=_MMASIM),
    _i("ada-mma-f16", "Ada Lovelace", "mma.sync.aligned.m16n8k32.row.col.f16.{a}.{b}.f16", (16, 8, 32), _FP8,
       "float16", "fused", 16, 13, "rne", -20, model=_MMASIM),
    _i("hopper-mma", "Hopper", "mma.sync.aligned.m16n8k32.row.col.f32.{a}.{b}.f32", (16, 8, 32), _FP8,
       "float32", "fused", 32, 13, "rz-e8m13", -133, model="MMA-Sim's wgmma model (MMA-Sim has no sm_90 FP8 mma)"),
    _i("hopper-mma-f16", "Hopper", "mma.sync.aligned.m16n8k32.row.col.f16.{a}.{b}.f16", (16, 8, 32), _FP8,
       "float16", "fused", 32, 13, "rne", -21, model="MMA-Sim's wgmma model (MMA-Sim has no sm_90 FP8 mma)"),
    _i("hopper-wgmma", "Hopper", "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{a}.{b}", (64, 8, 32), _FP8,
       "float32", "fused", 32, 13, "rz-e8m13", -133, model=_MMASIM),
    _i("hopper-wgmma-f16", "Hopper", "wgmma.mma_async.sync.aligned.m64n{n}k32.f16.{a}.{b}", (64, 8, 32), _FP8,
       "float16", "fused", 32, 13, "rne", -21, model=_MMASIM),
    _i("blackwell-mma", "Blackwell", "mma.sync.aligned.m16n8k32.row.col.f32.{a}.{b}.f32", (16, 8, 32), _FP8,
       "float32", "fused", 32, 31, "rne", -133, model=_FIT),
    _i("blackwell-mma-f16", "Blackwell", "mma.sync.aligned.m16n8k32.row.col.f16.{a}.{b}.f16", (16, 8, 32), _FP8,
       "float16", "fused", 32, 31, "rne", -21, model=_FIT),
    _i("blackwell-tcgen05-f8f6f4", "Blackwell", "tcgen05.mma.cta_group::1.kind::f8f6f4 (m128n{n}k32, f32)",
       (128, 8, 32), _F8F6F4, "float32", "fused", 32, 25, "rz", -133, model=_MMASIM),
    _i("blackwell-tcgen05-f8f6f4-f16", "Blackwell", "tcgen05.mma.cta_group::1.kind::f8f6f4 (m128n{n}k32, f16)",
       (128, 8, 32), _F8F6F4, "float16", "fused", 32, 25, "rne", -21, model=_MMASIM),
    _i("blackwell-tcgen05-mxf8f6f4", "Blackwell",
       "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32 (m128n{n}k32, ue8m0)", (128, 8, 32),
       _F8F6F4, "float32", "scaled", 32, 25, "rz", -133, scales=("ue8m0",), blocks=(32,), model=_MMASIM),
    _i("blackwell-tcgen05-mxf4nvf4", "Blackwell",
       "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block{16,32} (m128n{n}k64, ue8m0/ue4m3)",
       (128, 8, 64), ("e2m1fn",), "float32", "grouped", 64, 35, "rz", -139, group=16,
       scales=("ue8m0", "ue4m3"), blocks=(16, 32), modes=_NVF4_MODES, model=_MMASIM),
    _i("rtx-blackwell-mma", "RTX Blackwell", "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.{a}.{b}.f32",
       (16, 8, 32), _F8F6F4, "float32", "fused", 32, 25, "rz", -133, model=_MMASIM),
    _i("rtx-blackwell-mma-f16", "RTX Blackwell",
       "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f16.{a}.{b}.f16", (16, 8, 32), _F8F6F4, "float16",
       "fused", 32, 25, "rne", -21, model=_MMASIM),
    _i("rtx-blackwell-mma-mxf8f6f4", "RTX Blackwell",
       "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.{a}.{b}.f32.ue8m0",
       (16, 8, 32), _F8F6F4, "float32", "scaled", 32, 25, "rz", -133, scales=("ue8m0",), blocks=(32,),
       model=_MMASIM),
    _i("rtx-blackwell-mma-mxf4nvf4", "RTX Blackwell",
       "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.f32.e2m1.e2m1.f32.{ue8m0,ue4m3}",
       (16, 8, 64), ("e2m1fn",), "float32", "grouped", 64, 35, "rz", -139, group=16,
       scales=("ue8m0", "ue4m3"), blocks=(16, 32), modes=_NVF4_MODES, model=_MMASIM),
    _i("rubin-tcgen05-mxf4nvf4", "Rubin",
       "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block{16,32} (sm_107, m128n{n}k64, ue5m3/ue4m3/ue8m0)",
       (128, 8, 64), ("e2m1fn",), "float32", "grouped", 64, 35, "rz", -139, group=16,
       scales=("ue5m3", "ue4m3", "ue8m0"), blocks=(16, 32), modes=_RUBIN_MODES, model=_RUBIN),
    *_sixteen_bit(),
    _i("cdna3-mfma-fp8", "CDNA3", "v_mfma_f32_16x16x32_{a}_{b} / v_mfma_f32_32x32x16_{a}_{b}", (16, 16, 32),
       ("e4m3fnuz", "e5m2fnuz"), "float32", "paired", 16, 24, "rne", -999, pair_bits=31, model=_MMASIM),
]}


def get_instruction(instruction) -> Instruction:
    """The :class:`Instruction` for a catalogue name (or the object itself).

    Examples
    --------
    >>> get_instruction("cdna3-mfma-fp8").formats
    ('e4m3fnuz', 'e5m2fnuz')
    >>> get_instruction("ada-mma") is INSTRUCTIONS["ada-mma"]
    True
    """
    return named(instruction, Instruction, INSTRUCTIONS, "instruction", "fp8emu.gemm.Instruction")



# ----------------------------------------------------------------------------- evidence
_REC = "MATLAB-tensor-core model_validation"
#: What the Rubin row follows: the scale types and vector lengths, from public sources; its
#: accumulation is Blackwell's (no public source describes Rubin's).
_RUBIN_SOURCES = (
    "scale types and vectors from CUDA Tile IR 13.4.0 (NVIDIA/cuda-tile release notes: f8E5M3FNU, a block-scale "
    "type for cuda_tile.mmaf_scaled with f4E2M1FN, sm_107), cuTile Python 1.6.0 (float8_e5m3fnu scale dtype for "
    "FP4 block-scaled MMA on Rubin), CUTLASS 4.8 CuTe DSL (tcgen05 MX instruction descriptor scale_format "
    "UE4M3 = 0, E8M0 = 1, UE5M3 = 2) and the public Rubin kernel configs of flashinfer-ai/flashinfer#4601 "
    "(e5m3 x 16 / x 32, e4m3 x 16 / x 32, e8m0 x 16 / x 32) and NVIDIA/cudnn-frontend#545; accumulation "
    "assumed Blackwell's kind::mxf4nvf4 (fp8emu.gpu.tc_questions 'rubin-fp4-*' settle it on a Rubin GPU)")
#: Evidence behind each instruction, as data: ``("recordings", file, array, rows reproduced, rows,
#: note)`` for public GPU recordings (tests/data/tc_recordings), ``("mmasim", version, cases)`` for
#: random MMAs equal to MMA-Sim's model (tests/data/mmasim), ``("disagrees", ...)`` for recordings of
#: another instruction that the model does not reproduce, ``("model", sources)`` for a model that no
#: recording or simulator checks (the public sources it follows).  tests/test_instructions.py checks
#: every number against the data.
EVIDENCE = {
    "ada-mma": [("recordings", "ada_e4m3", "d_bits", 5000, 5000, ""),
                ("recordings", "ada_e5m2", "d_bits", 5000, 5000, ""),
                ("recordings", "l40s_e4m3", "d_bits", 5000, 5000, ""),
                ("recordings", "l40s_e5m2", "d_bits", 5000, 5000, ""),
                ("mmasim", "2.1.1", 200000)],
    "ada-mma-f16": [("recordings", "ada_e4m3", "d16_bits", 5000, 5000, ""),
                    ("recordings", "ada_e5m2", "d16_bits", 5000, 5000, ""),
                    ("mmasim", "2.1.1", 200000)],
    "hopper-mma": [("recordings", "h100_e4m3", "d_bits", 5000, 5000, "C = 0"),
                   ("recordings", "h100_e5m2", "d_bits", 5000, 5000, "C = 0"),
                   ("recordings", "h200_e4m3", "d_bits", 5000, 5000, "C = 0"),
                   ("recordings", "h200_e5m2", "d_bits", 5000, 5000, "C = 0")],
    "hopper-mma-f16": [("recordings", "h100_e4m3", "d16_bits", 3113, 5000, "rest unexplained"),
                       ("recordings", "h100_e5m2", "d16_bits", 3340, 5000, "rest unexplained"),
                       ("recordings", "h200_e4m3", "d16_bits", 3122, 5000, "rest unexplained"),
                       ("recordings", "h200_e5m2", "d16_bits", 3400, 5000, "rest unexplained")],
    "hopper-wgmma": [("mmasim", "2.1.1", 200000)],
    "hopper-wgmma-f16": [("mmasim", "2.1.1", 200000)],
    "blackwell-mma": [("recordings", "b200_e4m3", "d_bits", 5000, 5000, ""),
                      ("recordings", "b200_e5m2", "d_bits", 4999, 5000, "row 3935 unexplained")],
    "blackwell-mma-f16": [("recordings", "b200_e4m3", "d16_bits", 3108, 5000, "rest unexplained"),
                          ("recordings", "b200_e5m2", "d16_bits", 3403, 5000, "rest unexplained")],
    "blackwell-tcgen05-f8f6f4": [("mmasim", "2.1.1", 200000),
                                 ("disagrees", "b200_e4m3", "d_bits", 3207, 5000, "mma.sync recordings"),
                                 ("disagrees", "b200_e5m2", "d_bits", 3236, 5000, "mma.sync recordings")],
    "blackwell-tcgen05-f8f6f4-f16": [("mmasim", "2.1.1", 200000)],
    "blackwell-tcgen05-mxf8f6f4": [("mmasim", "2.1.1", 200000)],
    "blackwell-tcgen05-mxf4nvf4": [("mmasim", "2.1.1", 200000)],
    "rtx-blackwell-mma": [("mmasim", "2.1.1", 200000)],
    "rtx-blackwell-mma-f16": [("mmasim", "2.1.1", 200000)],
    "rtx-blackwell-mma-mxf8f6f4": [("mmasim", "2.1.1", 200000)],
    "rtx-blackwell-mma-mxf4nvf4": [("mmasim", "2.1.1", 200000)],
    "cdna3-mfma-fp8": [("mmasim", "2.1.1", 200000)],
    "rubin-tcgen05-mxf4nvf4": [("model", _RUBIN_SOURCES)],
}


# The 16-bit-input presets reproduce every row of their generation's recordings.
_WIDE_FILES = {"volta": ("v100",), "ampere": ("a100", "a2"), "ada": ("ada", "l40s"), "hopper": ("h100", "h200"),
               "blackwell": ("b200",)}
for _gen, _gpus in _WIDE_FILES.items():
    for _t, _kind in (("f16", "fp16"), ("bf16", "bf16"), ("tf32", "tf32")):
        if f"{_gen}-mma-{_t}in" in INSTRUCTIONS:
            EVIDENCE[f"{_gen}-mma-{_t}in"] = [("recordings", f"{g}_{_kind}", "d_bits", 5000, 5000, "") for g in _gpus
                                              ] + [("mmasim", "2.1.1", 200000)]
        if f"{_gen}-mma-{_t}in-f16" in INSTRUCTIONS:
            EVIDENCE[f"{_gen}-mma-{_t}in-f16"] = [("recordings", f"{g}_{_kind}", "d16_bits", 5000, 5000, "")
                                                  for g in _gpus] + [("mmasim", "2.1.1", 200000)]


def _evidence_text(e):
    if e[0] == "model":
        return f"model only: {e[1]}"
    if e[0] == "mmasim":
        return f"equals MMA-Sim {e[1]} on {e[2]:,} random MMAs"
    kind, file, arr, ok, n, note = e
    out = "f16" if arr == "d16_bits" else "f32"
    verb = "reproduces" if kind == "recordings" else "disagrees with"
    if kind == "disagrees":
        return f"{verb} {file} ({out}, {note}): reproduces {ok}/{n} rows"
    return f"{verb} {_REC} {file} ({out}{', ' + note if note else ''}): {ok}/{n} rows"


def presets():
    """Every catalogued instruction with the evidence behind it.

    Returns
    -------
    list of dict
        One per instruction: ``name``, ``arch``, ``ptx``, ``model`` (where the description
        comes from), ``evidence`` (sentences: public GPU recordings it reproduces (file,
        rows), random MMAs equal to MMA-Sim (version, count), or ``"model only"``) and
        ``records`` (the same as data, see :data:`EVIDENCE`).

    Examples
    --------
    >>> p = {q["name"]: q for q in presets()}
    >>> p["ada-mma"]["evidence"][0]
    'reproduces MATLAB-tensor-core model_validation ada_e4m3 (f32): 5000/5000 rows'
    >>> p["hopper-wgmma"]["evidence"]
    ['equals MMA-Sim 2.1.1 on 200,000 random MMAs']
    """
    return [{"name": i.name, "arch": i.arch, "ptx": i.ptx, "model": i.model,
             "evidence": [_evidence_text(e) for e in EVIDENCE.get(i.name, ())] or ["model only"],
             "records": list(EVIDENCE.get(i.name, ()))} for i in INSTRUCTIONS.values()]

