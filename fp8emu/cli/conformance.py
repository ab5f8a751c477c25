"""``fp8emu conformance``: reproduce every recorded H200 table with its profile."""

from __future__ import annotations

from .. import conformance


def register(sub, name, help_text):
    """Add the ``conformance`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Compare every recorded GPU table with its profile, exactly over all "
                                   "inputs, and print the Markdown table (exit 1 if any mismatches).")
    p.add_argument("--folder", default=None, help="folder of recorded tables (default: the package's copies)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the conformance table; 1 if any table is not reproduced."""
    rows = conformance.report(args.folder)
    print(conformance.markdown_table(rows))
    bad = [r["table"] for r in rows if r["mismatches"]]
    if bad:
        print(f"\n{len(bad)} table(s) NOT reproduced: {', '.join(bad)}")
        return 1
    print(f"\nall {len(rows)} recorded tables reproduced bit-exactly by their profiles")
    return 0
