"""Open questions about Blackwell tensor cores, with test vectors that settle them on a GPU.

Each :class:`Question` names candidate models (fp8emu accumulators or catalogue instructions)
and ships inputs whose outputs differ between them (package data
``fp8emu/data/tc_questions/<name>.npz``, made by ``tools/make_tc_questions.py``).  Running the
inputs through the GPU (``fp8emu validate-gpu --tc-questions``: ``torch._scaled_mm`` on CUDA,
C = 0; ``cuda.tile.mma_scaled`` for the Rubin UE5M3 questions) and counting which candidate reproduces every output answers the question.

``tcgen05-f8f6f4-fp8``
    What does a Blackwell (B200) FP8 GEMM (``tcgen05.mma`` ``kind::f8f6f4``, as cuBLASLt issues
    it) keep?  MMA-Sim models 25 fraction bits and a truncated result; the public B200
    ``mma.sync`` recordings need at least 31 bits and nearest-even; Khattak and Mikaitis' B200TCRN
    variant is 25 bits, nearest-even.
``nvfp4-accumulation``
    How are NVFP4 (E2M1, E4M3 scales per 16) products accumulated?  MMA-Sim: exact sums of 16,
    aligned on the scales' exponents with 35 fraction bits, result truncated; or every scaled
    product aligned with 25 bits (the FP8 path); or the exact sum rounded once (float32 accumulation).
``mxfp8-scale-alignment``
    Where do MXFP8 block scales enter?  MMA-Sim: their exponents join each product's before
    alignment (so a zero product's fixed exponent can swallow tiny scaled products); or each
    32-block's unscaled sum is scaled and added into float32 (software block scaling).
``rubin-fp4-ue5m3x16``, ``rubin-fp4-ue5m3x32``
    How does Rubin (sm_107) accumulate FP4 with UE5M3 block scales (vectors of 16, of 32)?  The
    catalogue's ``rubin-tcgen05-mxf4nvf4`` (model only) is Blackwell's ``kind::mxf4nvf4``: exact
    sums of 16, aligned on the scales' exponents with 35 fraction bits, result truncated.  The
    other candidates: 25 fraction bits (result truncated, or rounded to nearest even), one exact sum
    per 32-vector (x32), every scaled product aligned with 25 bits, or the exact sum rounded once.
    The scales span UE5M3's range (subnormals 2**-17 ... and 114688 included), so the alignment
    cuts bits.  The GPU side runs ``cuda.tile.mma_scaled`` with ``float8_e5m3fnu`` scales
    (cuTile >= 1.6 on an sm_107 device; PyTorch has no UE5M3 dtype).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..codec import decode
from ..gemm import GemmModel, Policy, block_scaled_mm, scaled_mm, step_row
from ..gemm.catalogue import INSTRUCTIONS
from ..scaling.mx import mx_from_codes
from ..scaling.nvfp4 import nvfp4_from_codes
from .validate import gpu_available

__all__ = ["Question", "QUESTIONS", "candidate_outputs", "load_vectors", "discrimination", "judge", "gpu_outputs",
           "validate", "blocked_scale_layout", "DATA"]

DATA = Path(__file__).parents[1] / "data" / "tc_questions"


@dataclasses.dataclass(frozen=True)
class Question:
    """An open question: the operand kind, K, and the candidate accumulators (name -> accumulator)."""

    name: str
    text: str
    kind: str            # "fp8", "mxfp8", "nvfp4" or "fp4-ue5m3"
    K: int
    candidates: tuple    # ((label, accumulator), ...)
    block: int = 16      # "fp4-ue5m3": elements per block scale along K


def _block_model(name, scale_at):
    """A block-scaled model of 25 fraction bits, truncated float32 steps of 64 products (scales at each
    product) or 32 (each K block's sum scaled into float32): a catalogue row plus where scales apply."""
    return GemmModel(name, "instruction", step_row(64 if scale_at == "product" else 32, 25, 24, "rtz"),
                     Policy(scale_at=scale_at))


def _rubin_candidates(block):
    """The plausible models of Rubin's FP4 MMA with UE5M3 scales per ``block`` (the catalogue's first)."""
    ins = INSTRUCTIONS["rubin-tcgen05-mxf4nvf4"]
    out = [("Blackwell mxf4nvf4 model (sums of 16, 35 bits, truncated)", ins.name),
           ("sums of 16, 25 bits, truncated", dataclasses.replace(ins, name="rubin-f25", frac_bits=25)),
           ("sums of 16, 25 bits, nearest even",
            dataclasses.replace(ins, name="rubin-f25-rne", frac_bits=25, rounding="rne"))]
    if block == 32:
        out.append(("sums of 32 (one per scale vector), 35 bits, truncated",
                    dataclasses.replace(ins, name="rubin-g32", group=32, scales=("ue5m3",), blocks=(32,),
                                        modes=(("ue5m3", 32),))))
    return tuple(out + [("scaled products aligned, 25 bits, truncated",
                         _block_model("scaled-products-f25", "product")),
                        ("exact sum, rounded once", "exact")])


QUESTIONS = {q.name: q for q in [
    Question("tcgen05-f8f6f4-fp8", "B200 FP8 GEMM: alignment width and result rounding", "fp8", 32,
             (("MMA-Sim tcgen05 (25 bits, truncated)", "blackwell-tcgen05-f8f6f4"),
              ("B200 mma.sync recordings (31 bits, nearest even)", "blackwell-mma"),
              ("B200TCRN (25 bits, nearest even)",
               dataclasses.replace(INSTRUCTIONS["blackwell-tcgen05-f8f6f4"], name="b200tcrn", rounding="rne")))),
    Question("nvfp4-accumulation", "B200 NVFP4 GEMM: how FP4 products are accumulated", "nvfp4", 64,
             (("MMA-Sim mxf4nvf4 (sums of 16, 35 bits, truncated)", "blackwell-tcgen05-mxf4nvf4"),
              ("scaled products aligned, 25 bits, truncated", _block_model("scaled-products-f25", "product")),
              ("exact sum, rounded once", "exact"))),
    Question("mxfp8-scale-alignment", "B200 MXFP8 GEMM: where the block scales enter the alignment", "mxfp8", 64,
             (("MMA-Sim mxf8f6f4 (scale exponents join the products')", "blackwell-tcgen05-mxf8f6f4"),
              ("block sums scaled into float32 (25 bits, truncated steps)",
               _block_model("block-sums-f25", "block")))),
    *(Question(f"rubin-fp4-ue5m3x{blk}", f"Rubin FP4 GEMM, UE5M3 scales per {blk}: how the scaled groups accumulate",
               "fp4-ue5m3", 64, _rubin_candidates(blk), blk) for blk in (16, 32)),
]}


def _operands(q: Question, z):
    """(a, b) as fp8emu takes them for ``block_scaled_mm`` / ``scaled_mm``; b is (K, N)."""
    if q.kind == "fp8":
        return z["a"], z["b"].T
    if q.kind == "mxfp8":
        return (mx_from_codes(z["a"], z["a_scales"], "e4m3fn", axis=1),
                mx_from_codes(np.ascontiguousarray(z["b"].T), np.ascontiguousarray(z["b_scales"].T), "e4m3fn", axis=0))
    one = np.float32(1.0)
    kw = {} if q.kind == "nvfp4" else {"scale_format": "e5m3fnu", "block_size": q.block}
    return (nvfp4_from_codes(z["a"], z["a_scales"], one, axis=1, **kw),
            nvfp4_from_codes(np.ascontiguousarray(z["b"].T), np.ascontiguousarray(z["b_scales"].T), one, axis=0,
                             **kw))


def candidate_outputs(q: Question, z):
    """{label: float32 row-wise dot products} of every candidate on the vectors ``z``.

    Row i of ``z["a"]`` is dotted with row i of ``z["b"]``: the diagonal of the GEMM
    ``A @ B.T``, which is how the GPU check computes them too.
    """
    a, b = _operands(q, z)
    out = {}
    for label, acc in q.candidates:
        if q.kind == "fp8":
            d = scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=acc)
        else:
            d = block_scaled_mm(a, b, accumulator=acc)
        out[label] = np.ascontiguousarray(np.diagonal(d)).astype(np.float32)
    return out


def load_vectors(name):
    """The shipped vectors of a question (a dict of arrays; ``outputs`` holds each candidate's bits)."""
    with np.load(DATA / f"{name}.npz") as z:
        return {k: z[k] for k in z}


def discrimination(z) -> dict:
    """What the shipped vectors ``z`` tell apart, computed from their recorded outputs: ``vectors``,
    ``parting`` (vectors on which at least two candidates differ) and ``weakest`` (the fewest vectors
    on which some pair of candidates differs).

    Examples
    --------
    >>> d = discrimination(load_vectors("tcgen05-f8f6f4-fp8"))
    >>> d["vectors"] == d["parting"] == 256, d["weakest"] >= 50
    (True, True)
    """
    bits = np.asarray(z["outputs"])
    C = len(bits)
    pairs = [int((bits[i] != bits[j]).sum()) for i in range(C) for j in range(i + 1, C)]
    return {"vectors": bits.shape[1], "parting": int((bits != bits[:1]).any(axis=0).sum()),
            "weakest": min(pairs, default=0)}


def judge(q: Question, z, gpu_bits):
    """{candidate label: rows of the GPU's outputs it reproduces} (bits compared)."""
    labels = [c[0] for c in q.candidates]
    return {lab: int((z["outputs"][j] == gpu_bits).sum()) for j, lab in enumerate(labels)}


# ----------------------------------------------------------------------------- the GPU side
def blocked_scale_layout(scales):
    """Scale codes (rows, K-blocks) in cuBLASLt's 128 x 4 tiled layout for 1-D block scaling.

    Element (r, c) goes to ``((r // 128) * (C // 4) + c // 4) * 512 + (r % 32) * 16 +
    ((r % 128) // 32) * 4 + c % 4`` with rows padded to 128 and columns to 4 (the layout
    cuBLASLt documents for ``VEC32_UE8M0`` / ``VEC16_UE4M3`` scales).

    Examples
    --------
    >>> s = np.arange(8, dtype=np.uint8).reshape(4, 2)
    >>> out = blocked_scale_layout(s)
    >>> out.size, int(out[16]), int(out[1])
    (512, 2, 1)
    """
    s = np.asarray(scales)
    R, C = -(-s.shape[0] // 128) * 128, -(-s.shape[1] // 4) * 4
    out = np.zeros(R * C, s.dtype)
    r, c = np.meshgrid(np.arange(s.shape[0]), np.arange(s.shape[1]), indexing="ij")
    idx = ((r // 128) * (C // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    out[idx] = s
    return out


def gpu_outputs(q: Question, z, torch, device="cuda"):
    """float32 bits of the GPU's row-wise dot products (``torch._scaled_mm``, C = 0, diagonal of A @ B.T)."""
    def t(x, dtype=None):
        v = torch.from_numpy(np.ascontiguousarray(x)).to(device)
        return v.view(dtype) if dtype is not None else v
    if q.kind == "fp8":
        one = torch.ones((), device=device)
        d = torch._scaled_mm(t(z["a"], torch.float8_e4m3fn), t(z["b"], torch.float8_e4m3fn).t(), one, one,
                             out_dtype=torch.float32)
    elif q.kind == "mxfp8":
        sa = t(blocked_scale_layout(z["a_scales"]), torch.float8_e8m0fnu)
        sb = t(blocked_scale_layout(z["b_scales"]), torch.float8_e8m0fnu)
        d = torch._scaled_mm(t(z["a"], torch.float8_e4m3fn), t(z["b"], torch.float8_e4m3fn).t(), sa, sb,
                             out_dtype=torch.float32)
    elif q.kind == "fp4-ue5m3":
        return _cutile_outputs(q, z, torch, device)
    else:
        def packed(codes):      # two E2M1 per byte, element 2i in the low nibble
            return t((codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), torch.float4_e2m1fn_x2)
        sa = t(blocked_scale_layout(z["a_scales"]), torch.float8_e4m3fn)
        sb = t(blocked_scale_layout(z["b_scales"]), torch.float8_e4m3fn)
        d = torch._scaled_mm(packed(z["a"]), packed(z["b"]).t(), sa, sb, out_dtype=torch.float32)
    return np.ascontiguousarray(torch.diagonal(d).float().cpu().numpy()).view(np.uint32)


def _cutile_outputs(q: Question, z, torch, device):
    """float32 bits of the row-wise dot products through ``cuda.tile.mma_scaled`` with UE5M3 scales (one
    tile per 16 rows: the diagonal of its 16 x 16 result).  Written against cuTile 1.6's documented API
    (``mma_scaled(x, x_scale, y, y_scale, acc)``; ``float8_e5m3fnu`` needs sm_107); not yet run on a
    Rubin GPU."""
    import cuda.tile as ct              # optional: only on a GPU machine with cuTile

    R, K, nb, T = len(z["a"]), q.K, q.K // q.block, 16
    dev = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device)          # noqa: E731
    # the E2M1 elements as their float32 values (cast exactly in the kernel), the UE5M3 scales as bytes
    a, b = (dev(decode(z[k], "e2m1fn", dtype=np.float32)) for k in ("a", "b"))
    sa, sb = dev(z["a_scales"]), dev(z["b_scales"])
    out = torch.zeros((R, T), dtype=torch.float32, device=device)

    @ct.kernel
    def kernel(a, sa, b, sb, out):
        i = ct.bid(0)
        x = ct.astype(ct.load(a, index=(i, 0), shape=(T, K)), ct.float4_e2m1fn)
        y = ct.astype(ct.load(b, index=(i, 0), shape=(T, K)), ct.float4_e2m1fn)
        xs = ct.bitcast(ct.load(sa, index=(i, 0), shape=(T, nb)), ct.float8_e5m3fnu)
        ys = ct.bitcast(ct.load(sb, index=(i, 0), shape=(T, nb)), ct.float8_e5m3fnu)
        acc = ct.zeros((T, T), dtype=ct.float32)
        ct.store(out, index=(i, 0), tile=ct.mma_scaled(x, xs, ct.transpose(y), ct.transpose(ys), acc))

    ct.launch(torch.cuda.current_stream(), (R // T, 1, 1), kernel, (a, sa, b, sb, out))
    d = out.cpu().numpy().reshape(R // T, T, T)
    return np.ascontiguousarray(np.concatenate([np.diagonal(t) for t in d])).view(np.uint32)


def validate(out=print):
    """Run every question's vectors on the GPU and print which candidate reproduces the outputs.

    Returns ``None`` without a CUDA device or torch, else ``{question: {candidate: rows} or error}``.
    """
    ok, torch = gpu_available()
    if not ok:
        out(f"tc-questions: skipped ({torch})")
        return None
    res = {}
    for name, q in QUESTIONS.items():
        z = load_vectors(name)
        try:
            got = gpu_outputs(q, z, torch)
        except Exception as exc:   # an unsupported kind on this GPU/torch: reported, not fatal
            res[name] = f"failed: {type(exc).__name__}: {exc}"
            out(f"{name}: {res[name]}")
            continue
        res[name] = judge(q, z, got)
        n, d = len(got), discrimination(z)
        # each statement is computed from the shipped outputs, not promised by how they were made
        out(f"{name} ({q.text}), {n} vectors; {d['parting']} of them part at least two candidates, and every "
            f"pair of candidates differs on at least {d['weakest']}:")
        for lab, k in res[name].items():
            out(f"  {k:5d}/{n}  {lab}{'   <- reproduces every output' if k == n else ''}")
    return res
