"""``fp8emu figures``: regenerate the numerics-lab figures."""

from __future__ import annotations

from ..lab import plots


def register(sub, name, help_text):
    """Add the ``figures`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Regenerate every available figure deterministically into --out.")
    p.add_argument("--out", default="figures", help="output folder (default: figures)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="render only these figures")
    p.add_argument("--size", type=float, default=1.0, help="work factor; <1 for quick coarse figures")
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
    if not args.size > 0:
        raise ValueError(f"--size must be positive, got {args.size}")
    for p in plots.save_figures(args.out, args.only or None, size=args.size, progress=not args.quiet):
        print(p)
    return 0
