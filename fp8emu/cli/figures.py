"""``fp8emu figures``: regenerate the numerics-lab figures."""

from __future__ import annotations

import argparse
import os

from ..lab import plots
from . import positive_float


def _size(text):
    v = positive_float(text)
    if v > 16:   # the work grows with the factor: bounded before anything is computed
        raise argparse.ArgumentTypeError(f"expected a number in (0, 16], got {text}")
    return v


def register(sub, name, help_text):
    """Add the ``figures`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Regenerate every available figure deterministically into --out.")
    p.add_argument("--out", default="figures", help="output folder (default: figures)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="render only these figures")
    p.add_argument("--size", type=_size, default=1.0, help="work factor in (0, 16]; <1 for quick coarse figures")
    p.add_argument("--list", action="store_true", help="list figure names and exit")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    """List or render the figures."""
    if args.list:
        avail = set(plots.available_figures())
        for n in plots.FIGURES:
            print(f"{n}{'' if n in avail else '  (unavailable: missing dependency)'}")
        return 0
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} is a file; give a folder")
    for p in plots.save_figures(args.out, args.only or None, size=args.size, progress=not args.quiet):
        print(p)
    return 0
