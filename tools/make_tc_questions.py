"""Make the discriminating test vectors of fp8emu.gpu.tc_questions (fp8emu/data/tc_questions/*.npz).

For each question, random inputs are drawn (wide exponents, mixed signs, zeros, extreme block
scales) and kept only where the candidate models' outputs differ (all of them pairwise where
possible), up to ``--n`` rows.  Each file holds the inputs (row i of ``a`` dotted with row i of
``b``; block scales per row and K-block), the candidates' labels and their float32 outputs
(bits).  ``python3 tools/make_tc_questions.py [--n 256] [--seed 0]``.
"""

import argparse
from pathlib import Path

import numpy as np

from fp8emu.gpu.tc_questions import DATA, QUESTIONS, candidate_outputs


def draw(q, rng, rows):
    K = q.K
    if q.kind == "nvfp4":
        a = rng.integers(0, 16, (rows, K)).astype(np.uint8)
        b = rng.integers(0, 16, (rows, K)).astype(np.uint8)
        # per block: a tiny, a huge or a middling scale, so the four blocks span > 24 binades
        pick = rng.integers(0, 3, (2, rows, K // 16))
        codes = np.choose(pick, [rng.integers(1, 9, pick.shape), rng.integers(110, 127, pick.shape),
                                 rng.integers(40, 80, pick.shape)])
        sa, sb = codes[0].astype(np.uint8), codes[1].astype(np.uint8)
        return dict(a=a, b=b, a_scales=sa, b_scales=sb)
    if q.kind == "fp4-ue5m3":
        a = rng.integers(0, 16, (rows, K)).astype(np.uint8)
        b = rng.integers(0, 16, (rows, K)).astype(np.uint8)
        # per block a UE5M3 scale: subnormal or tiny (2**-17 ...), huge (up to 114688) or middling, so the
        # blocks span most of UE5M3's 2**-17 ... 2**16 and the 35-bit alignment cuts bits
        pick = rng.integers(0, 3, (2, rows, K // q.block))
        # some blocks cancel exactly (in each group of 16 the second 8 products are the first 8 negated)
        # under huge scales: a zero group sum still carries its scales' exponent, so such a block sets
        # the alignment and the result is what the other blocks keep of their bits (where the candidates
        # part)
        cancel_blocks = rng.random((rows, K // q.block)) < 0.3
        pick[:, cancel_blocks] = 1
        codes = np.choose(pick, [rng.integers(1, 40, pick.shape), rng.integers(200, 255, pick.shape),
                                 rng.integers(100, 140, pick.shape)])
        cancel = np.repeat(cancel_blocks, q.block // 16, axis=1)
        for g in range(K // 16):
            lo, hi = slice(16 * g, 16 * g + 8), slice(16 * g + 8, 16 * g + 16)
            r = cancel[:, g]
            a[r, hi] = a[r, lo]
            b[r, hi] = b[r, lo] ^ np.uint8(8)
        return dict(a=a, b=b, a_scales=codes[0].astype(np.uint8), b_scales=codes[1].astype(np.uint8))
    sign = lambda: (rng.integers(0, 2, (rows, K)) << 7)                       # noqa: E731
    a = (rng.integers(0, 0x7F, (rows, K)) | sign()).astype(np.uint8)
    b = (rng.integers(0, 0x7F, (rows, K)) | sign()).astype(np.uint8)
    zero = rng.random((rows, K)) < 0.1
    a = np.where(zero, 0, a).astype(np.uint8)
    out = dict(a=a, b=b)
    if q.kind == "mxfp8":
        base = np.where(rng.random((rows, 1)) < 0.5, rng.integers(0, 12, (rows, 1)), rng.integers(100, 150, (rows, 1)))
        out["a_scales"] = np.clip(base + rng.integers(-8, 9, (rows, K // 32)), 0, 254).astype(np.uint8)
        out["b_scales"] = np.clip(base + rng.integers(-8, 9, (rows, K // 32)), 0, 254).astype(np.uint8)
    return out


def spread(bits, n):
    """``n`` row indices chosen greedily so that every pair of candidates differs on many rows: each
    pick is a row that parts the pair parted least so far, and most of the other pairs still short.
    Only rows that part at least one pair are picked (once every pair had its share, a row that
    parted none scored as well as one that parted some: 19 of the 256 x32 rows were such rows)."""
    C = len(bits)
    pairs = [(i, j) for i in range(C) for j in range(i + 1, C)]
    differ = np.array([bits[i] != bits[j] for i, j in pairs])          # (pairs, rows)
    counts = np.zeros(len(pairs), int)
    free = differ.any(axis=0)
    if free.sum() < n:
        raise SystemExit(f"only {int(free.sum())} of {bits.shape[1]} drawn rows part any pair; {n} are needed")
    chosen = []
    for _ in range(n):
        weakest = int(np.argmin(counts))
        short = counts < n // 4
        score = (differ & short[:, None]).sum(axis=0) + 1000 * differ[weakest]
        score = np.where(free, score, -1)
        r = int(np.argmax(score))
        chosen.append(r)
        free[r] = False
        counts += differ[:, r]
    return np.array(chosen)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DATA, help=f"folder written (default: the package data, {DATA})")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for name, q in QUESTIONS.items():
        keep = None
        if q.kind == "fp4-ue5m3":     # many candidates: rows picked so that every pair parts often
            z = draw(q, rng, 2048)
            bits = np.array([v.view(np.uint32) for v in candidate_outputs(q, z).values()])
            keep = {k: v[spread(bits, args.n)] for k, v in z.items()}
        for _ in range(0 if keep is not None else 20):
            z = draw(q, rng, 1024)
            outs = candidate_outputs(q, z)
            bits = np.array([v.view(np.uint32) for v in outs.values()])
            distinct = np.array([len(set(col)) for col in bits.T])
            order = np.argsort(-distinct, kind="stable")
            sel = order[distinct[order] >= 2]
            part = {k: v[sel] for k, v in z.items()}
            keep = part if keep is None else {k: np.concatenate([keep[k], part[k]]) for k in keep}
            if len(keep["a"]) >= args.n:
                break
        keep = {k: v[:args.n] for k, v in keep.items()}
        outs = candidate_outputs(q, keep)
        labels = list(outs)
        np.savez_compressed(args.out / f"{name}.npz", **keep, labels=np.array(labels),
                            outputs=np.array([outs[lab].view(np.uint32) for lab in labels]))
        bits = np.array([outs[lab].view(np.uint32) for lab in labels])
        idle = int((bits == bits[0]).all(axis=0).sum())
        if idle:   # validate-gpu reports each question's vectors as discriminating: never ship one that is not
            raise SystemExit(f"{name}: {idle} of {len(keep['a'])} vectors part no pair of candidates")
        print(name, len(keep["a"]), "vectors; rows where each pair differs:",
              {f"{i}-{j}": int((bits[i] != bits[j]).sum())
               for i in range(len(labels)) for j in range(i + 1, len(labels))})


if __name__ == "__main__":
    main()
