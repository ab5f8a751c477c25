"""Survey the float32 GEMM summation orders torch's CPU ``mm`` takes on this machine (needs torch).

Reveals (``fp8emu.gemm.cpu_order.reveal_here``) the order of every shape of a grid, 1 and 2 torch threads,
and writes one JSON file: the machine's facts (CPU, kernel flags, MKL settings, torch and BLAS versions),
then per shape and thread count the order found (``describe()`` text), the fraction of outputs it
explains; it prints whether a recorded model (``--model``) gives the same order.  Run it on each CPU
family (and MKL setting) to see what a recorded model must say there:

    python tools/record_cpu_order.py --out docs/data/cpu-order/NAME.json
    MKL_ENABLE_INSTRUCTIONS=AVX2 python tools/record_cpu_order.py --out docs/data/cpu-order/NAME-avx2.json

``--random N`` instead checks a recorded model against torch's own ``mm`` on N random shapes (M, N
log-uniform in 2 .. 1200, K uniform in 1 .. 4096, 1 and 2 threads, float32 operands of wide magnitudes;
``--layouts`` cycles the operand layouts, ``T`` an operand reaching ``mm`` as a transposed view):
per shape, how many outputs differ and whether the model calls the shape proven (it must match there)
or warns:

    python tools/record_cpu_order.py --random 300 --out docs/data/cpu-order/NAME-random.json
    MKL_CBWR=COMPATIBLE python tools/record_cpu_order.py --random 300 --seed 1 --layouts NN,NT,TN,TT \
        --model mkl-2024.2-compatible --out docs/data/cpu-order/NAME-compatible-random.json

``--starts`` surveys how the sums start (``SumTree.start``: the sign of a zero whose first product is -0 or
underflows) on small and single-row or -column shapes, in every layout (``--layouts`` to choose), and how
many outputs the recorded model starts alike:

    python tools/record_cpu_order.py --starts --out docs/data/cpu-order/NAME-starts.json
"""
import argparse
import json
import os
import platform
import sys
import tempfile

import numpy as np
import torch

from fp8emu.cli.cpu_order import MAX_THREADS
from fp8emu.gemm import cpu_order, order_probe, sumtree

GRID = [(m, k, n) for m, n in ((2, 2), (3, 5), (8, 8), (13, 16), (32, 32), (64, 64), (128, 96))
        for k in (16, 64, 208, 384, 385, 512, 768, 1000, 1024, 2048, 4096)]


#: --starts: outer products, single rows and columns (MKL's gemv), small and blocked GEMMs
STARTS_GRID = [(1, 1, 1), (1, 1, 4), (4, 1, 1), (2, 1, 2), (4, 1, 4), (1, 2, 4), (1, 8, 1), (1, 5, 1), (4, 2, 1),
               (3, 5, 1), (2, 2, 2), (4, 8, 4), (8, 64, 8), (16, 400, 9), (9, 9, 9), (5, 700, 3), (64, 512, 64),
               (1, 500, 7), (7, 500, 1), (8, 16, 1), (1, 16, 8), (33, 40, 17), (12, 800, 12), (200, 3, 200),
               (2, 1000, 2), (100, 100, 1), (1, 100, 100)]


def _starts(args, threads):
    """Where torch's sums start, per shape, layout and thread count, and whether the recorded model agrees."""
    rec = cpu_order.RECORDED[args.model]
    rows = []
    # off the CPU and MKL settings the model was proven on every row said "proven" (as --random's did once),
    # where order_for warns for every shape
    off = _off_model(rec)
    for (M, K, N) in STARTS_GRID:
        for layout in args.layouts:
            for t in threads:
                order, facts = cpu_order.reveal_here(M, K, N, threads=t, layout=layout)
                found = np.array([tr.start for tr in order.trees])[order.classes]
                model = rec.order(M, K, N, t, layout)
                said = np.array([tr.start for tr in model.trees])[model.classes]
                why = off or rec.unproven(M, K, N, t, layout)
                rows.append({"M": M, "K": K, "N": N, "threads": t, "layout": layout, "explained": facts["explained"],
                             "starts": {s: int(np.sum(found == s)) for s in sumtree.STARTS if np.any(found == s)},
                             "fma": sorted({tr.fma for tr in order.trees}), "model_agrees": int(np.sum(found == said)),
                             "outputs": M * N, "proven": why is None})
                print(f"{M}x{K}x{N} t{t} {layout}: {rows[-1]['starts']}, the model agrees on {rows[-1]['model_agrees']}"
                      f" of {M * N}{'' if why is None else ' (warns)'}", file=sys.stderr)
    return rows


def _off_model(rec):
    """Why ``rec`` is off this machine's CPU and MKL settings (printed as a note), or None."""
    info = cpu_order.machine()
    off = None if rec.applies_here(info) else (
        f"this machine ({info['vendor'] or 'unknown vendor'}, MKL settings {info['mkl_env'] or 'none'}) is not "
        f"where {rec.name} was proven")
    if off:
        print(f"note: {off}; every shape is marked as warned", file=sys.stderr)
    return off


def _operand(x, how):
    """``x`` as torch gets it: row-major (``N``) or a transposed view of a row-major copy of x.T (``T``)."""
    return torch.from_numpy(x).clone() if how == "N" else torch.from_numpy(np.ascontiguousarray(x.T)).t()


def _random(args, threads):
    """Random shapes: the recorded model against torch.mm here."""
    rec = cpu_order.RECORDED[args.model]
    rng = np.random.default_rng(args.seed)
    rows = []
    # off the CPU and MKL settings the model was proven on, order_for warns for every shape: the rows said
    # "proven" there (and "differ" then read as the model's fault)
    off = _off_model(rec)
    for i in range(args.random):
        t = threads[i % len(threads)]
        layout = args.layouts[(i // len(threads)) % len(args.layouts)]
        M, N = (int(v) for v in np.exp(rng.uniform(np.log(2), np.log(1201), 2)))
        K = int(rng.integers(1, 4097))
        torch.set_num_threads(t)

        def mm(a, b):
            return torch.mm(_operand(a, layout[0]), _operand(b, layout[1])).numpy()

        bad = order_probe.check_order(rec.order(M, K, N, t, layout), mm, M, K, N, trials=2, seed=i)
        why = off or rec.unproven(M, K, N, t, layout)
        rows.append({"M": M, "K": K, "N": N, "threads": t, "layout": layout, "outputs": 2 * M * N, "differ": bad,
                     "proven": why is None, "warning": why})
        print(f"{M}x{K}x{N} t{t} {layout}: {bad} of {2 * M * N} differ{'' if why is None else ' (warns)'}",
              file=sys.stderr)
    return rows


def _count(low):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {v}")
        return v
    return parse


def _threads(text):
    # torch.set_num_threads refuses 0 and crashed (a segmentation fault) at 100000
    words = [w.strip() for w in text.split(",")]
    # ASCII digits only: "²" is a digit to str.isdigit but not to int() (argparse's "invalid _threads value")
    if not all(w.isascii() and w.isdigit() and 1 <= int(w) <= MAX_THREADS for w in words):
        raise argparse.ArgumentTypeError(f"expected thread counts 1..{MAX_THREADS} separated by commas, got {text!r}")
    # each count once: "1,1" surveyed every grid shape twice and counted it twice in "N GEMMs"
    return list(dict.fromkeys(int(w) for w in words))


def _out(text):
    # checked before the survey (minutes): a file in an existing folder
    if not text:
        raise argparse.ArgumentTypeError("'' names no file")
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    # abspath drops a trailing separator: 'new/' passed, and open() failed with "Is a directory" after the survey
    if text.endswith((os.sep, os.altsep or os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} ends with {text[-1]!r}, a folder's name; give a file name")
    if os.path.islink(text) and not os.path.exists(text):
        # open() follows the link: to nothing (a missing folder, a loop) it failed after the survey
        target = os.path.realpath(text)
        if os.path.islink(target) or not os.path.isdir(os.path.dirname(target)):
            raise argparse.ArgumentTypeError(f"{text!r} is a symbolic link to nothing (dangling, or a loop); give "
                                             "a file name")
        folder = os.path.dirname(target)        # where the file will be written
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    try:        # a folder that takes no new file (/proc, a read-only mount) failed only after the survey
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write a file in the folder of {text!r}: {e.strerror}") from None
    return text


def _layouts(text):
    words = [w.strip() for w in text.split(",")]
    if not all(w in cpu_order.LAYOUTS for w in words):
        raise argparse.ArgumentTypeError(f"expected layouts of {', '.join(cpu_order.LAYOUTS)} separated by commas, "
                                         f"got {text!r}")
    return words


def _also(args):
    """The options besides --random, --seed and --layouts that the file's rows depend on (it said the defaults'
    command for a survey of --threads 2, or of another --model)."""
    return ((f" --threads {','.join(map(str, args.threads))}" if args.threads != [1, 2] else "")
            + (f" --model {args.model}" if args.model != "mkl-2024.2-avx512" else ""))


def _write(args, rows, options, **extra):
    """The file of a --starts or --random survey: the machine's facts, the command, the rows."""
    doc = {"machine": cpu_order.machine(), "library": cpu_order._library(torch), "model": args.model,
           "python": platform.python_version(), "numpy": np.__version__, "layout": ",".join(args.layouts),
           **extra, "recorded_by": f"tools/record_cpu_order.py {options}" + _also(args), "gemms": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=_out, help="the JSON file to write (its folder must exist)")
    ap.add_argument("--threads", default=[1, 2], type=_threads, help="torch thread counts, e.g. 1,2 (default)")
    ap.add_argument("--random", type=_count(0), default=0,
                    help="check the recorded model on this many random shapes (0: the grid survey)")
    ap.add_argument("--model", default="mkl-2024.2-avx512", choices=sorted(cpu_order.RECORDED))
    ap.add_argument("--seed", type=_count(0), default=None, help="the random shapes' seed (default 0; --random only)")
    ap.add_argument("--layouts", default=None, type=_layouts,
                    help="layouts the random shapes cycle through, e.g. NN,NT,TN,TT (default NN; --random only), "
                         "or --starts surveys (default all four)")
    ap.add_argument("--starts", action="store_true", help="survey where sums start (the sign of a zero)")
    args = ap.parse_args()
    # the grid survey probes the NN layout with no random draw: these options were ignored there, the file
    # saying "layout": "NN" while --layouts NT was asked for
    if args.starts and args.random:
        ap.error("--starts and --random are two surveys; ask for one")
    given = [o for o, v in (("--seed", args.seed), ("--layouts", args.layouts)) if v is not None
             and not (o == "--layouts" and args.starts)]
    if given and not args.random:
        # --starts --seed 3 was told "(the grid survey probes the NN layout)", of a survey not asked for
        ap.error(f"{' and '.join(given)} apply to --random N only (" + (
            "--starts surveys fixed shapes, with no random draw" if args.starts else
            "the grid survey probes the NN layout") + ")")
    args.seed = 0 if args.seed is None else args.seed
    args.layouts = args.layouts or (list(cpu_order.LAYOUTS) if args.starts else ["NN"])
    threads = args.threads
    if args.starts:
        rows = _starts(args, threads)
        _write(args, rows, "--starts" + (f" --layouts {','.join(args.layouts)}"
                                         if args.layouts != list(cpu_order.LAYOUTS) else ""))
        inside = [r for r in rows if r["proven"]]
        print(f"{len(rows)} GEMMs; {len(inside)} proven, of which {sum(r['model_agrees'] < r['outputs'] for r in inside)}"
              f" start otherwise than {args.model} says")
        return
    if args.random:
        rows = _random(args, threads)
        _write(args, rows, f"--random {args.random} --seed {args.seed}"
               + (f" --layouts {','.join(args.layouts)}" if args.layouts != ["NN"] else ""), seed=args.seed)
        inside = [r for r in rows if r["proven"]]
        print(f"{len(rows)} shapes; {len(inside)} proven, of which {sum(r['differ'] > 0 for r in inside)} differ; "
              f"{sum(r['differ'] > 0 for r in rows if not r['proven'])} of {len(rows) - len(inside)} warned shapes differ")
        return
    rec = cpu_order.RECORDED[args.model]
    rows, same = [], 0
    for t in threads:
        for M, K, N in GRID:
            order, facts = cpu_order.reveal_here(M, K, N, threads=t)
            # each class's tree as text, in any class order (class numbers are the probe's, or the model's)
            hit = sorted(order.describe().split("; ")) == sorted(rec.order(M, K, N, t).describe().split("; "))
            same += hit
            rows.append({"M": M, "K": K, "N": N, "threads": t, "explained": facts["explained"],
                         "classes": len(order.trees),
                         "order": order.describe()})
            print(f"{M}x{K}x{N} t{t}: {'=' if hit else '!'} {order.describe()[:100]}", file=sys.stderr)
    info = cpu_order.machine()
    doc = {"machine": info, "library": cpu_order._library(torch), "python": platform.python_version(),
           "numpy": np.__version__, "layout": "NN", "recorded_by": "tools/record_cpu_order.py" + _also(args),
           "gemms": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{len(rows)} GEMMs; {same} in {args.model}'s order; "
          f"{sum(r['explained'] == 1.0 for r in rows)} fully explained")


if __name__ == "__main__":
    main()
