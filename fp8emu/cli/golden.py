"""``fp8emu golden``: write golden vectors with expected codes for kernel tests."""

from __future__ import annotations

from .. import testing


def register(sub, name, help_text):
    """Add the ``golden`` subcommand."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("--format", required=True, help="target format, e.g. e4m3fn")
    p.add_argument("--profile", default="ocp", help="implementation profile (default: ocp)")
    p.add_argument("--source-dtype", default="float32", choices=list(testing.SOURCE_DTYPES))
    p.add_argument("--rounding", default="rne")
    p.add_argument("--saturate", action="store_true")
    p.add_argument("--out", required=True, help="output file (.json or .npz)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Write the vectors and say what was written."""
    g = testing.save_golden(args.out, args.format, source_dtype=args.source_dtype, profile=args.profile,
                            rounding=args.rounding, saturate=args.saturate)
    print(f"wrote {g['codes'].size} {g['format']} vectors ({g['source_dtype']} inputs, "
          f"profile {g['profile']}) to {args.out}")
    return 0
