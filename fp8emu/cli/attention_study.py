"""``fp8emu attention-study``: emulated FP8 attention error versus context, promotion, P pre-scale, scales."""

from __future__ import annotations

import csv

from ..lab import attention as attention_lab
from ..lab import study
from . import int_option, output_file, scheduler_address, worker_count

#: Largest context (keys) and head dimension accepted, and the largest keys x head-dim product: K and V
#: of one case at that size take 2 x 2**26 x 8 bytes = 1 GiB in the float64 reference.
MAX_CONTEXT = 1 << 21
MAX_HEAD_DIM = 1024
MAX_ELEMENTS = 1 << 26
MAX_QUERIES = 4096


def _ints(text, what, top):
    try:
        vals = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not vals or any(not 1 <= v <= top for v in vals):
        raise ValueError(f"{what} must be integers in 1..{top}, got {text!r}")
    return vals


def _names(text, allowed, what):
    vals = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise ValueError(f"{what} must be among {', '.join(allowed)}; got {text!r}")
    return vals


def register(sub, name, help_text):
    """Add the ``attention-study`` subcommand."""
    p = sub.add_parser(
        name, help=help_text,
        description="Run emulated FP8 attention (fp8emu.attention) over context lengths, P·V promotion "
                    "intervals, P pre-scales (FA3 max offset; FA4 before/after the #2717 saturation fix) "
                    "and per-tensor vs per-head descales, on Gaussian and outlier-channel Q/K.  Prints a "
                    "Markdown table of errors against float64 attention; --csv and --figure save them.")
    p.add_argument("--contexts", default="1024,2048,4096",
                   help="comma-separated key counts, increasing (default 1024,2048,4096; the committed "
                        "figure uses 1024,...,131072)")
    p.add_argument("--queries", type=int_option(1, MAX_QUERIES), default=8,
                   help="query rows attending to every key (default 8)")
    p.add_argument("--head-dim", type=int_option(1, MAX_HEAD_DIM), default=128, help="head dimension (default 128)")
    p.add_argument("--experiments", default=",".join(attention_lab.EXPERIMENTS),
                   help=f"comma-separated subset of {','.join(attention_lab.EXPERIMENTS)}")
    p.add_argument("--distributions", default=",".join(attention_lab.DISTRIBUTIONS),
                   help=f"comma-separated subset of {','.join(attention_lab.DISTRIBUTIONS)}")
    p.add_argument("--promote-every", default="1,4,64",
                   help="promotion intervals in key blocks for the promotion experiment (default 1,4,64)")
    p.add_argument("--seed", type=int_option(0), default=0, help="seed of the data (default 0)")
    p.add_argument("--csv", metavar="PATH", type=output_file(), help="write the rows as CSV")
    p.add_argument("--figure", metavar="PATH", type=output_file(".png"), help="write the four-panel figure (PNG)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=worker_count, metavar="N",
                       help="run the cases on a local Dask cluster of N processes (needs the [dask] extra)")
    group.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS", help="run on an existing dask.distributed scheduler")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no table")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the study and print its table."""
    contexts = _ints(args.contexts, "--contexts", MAX_CONTEXT)
    promote = _ints(args.promote_every, "--promote-every", MAX_CONTEXT)
    experiments = _names(args.experiments, attention_lab.EXPERIMENTS, "--experiments")
    distributions = _names(args.distributions, attention_lab.DISTRIBUTIONS, "--distributions")
    if max(contexts) * args.head_dim > MAX_ELEMENTS:   # bounded before anything is allocated
        raise ValueError(f"--contexts {max(contexts)} x --head-dim {args.head_dim} is above {MAX_ELEMENTS} "
                         "elements per K/V (about 1 GiB in the float64 reference); use smaller sizes")
    with study.dask_client(workers=args.workers, scheduler=args.scheduler) as client:
        rows = attention_lab.attention_study(contexts=contexts, queries=args.queries, head_dim=args.head_dim,
                                             experiments=experiments, distributions=distributions,
                                             promote_every=promote, seed=args.seed, progress=not args.quiet,
                                             client=client)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if args.figure:
        fig = attention_lab.figure_attention(rows=rows)
        fig.savefig(args.figure, dpi=100, bbox_inches="tight", metadata={"Software": None})
    if not args.quiet:
        print(attention_lab.study_table(rows))
    return 0
