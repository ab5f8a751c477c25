"""``fp8emu decode CODE...``: the value of each code in any output type."""

from __future__ import annotations

from .. import describe


def register(sub, name, help_text):
    """Add the ``decode`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Print the bits and value of each CODE, and the value's bit pattern in "
                                   "--dtype.")
    p.add_argument("codes", nargs="+", metavar="CODE", help="codes: 0x7e, 126 or 0b01111110")
    p.add_argument("--format", "-f", default="e4m3fn", help="format of the codes (default e4m3fn)")
    p.add_argument("--dtype", default="float32", choices=list(describe.SOURCE_DTYPES),
                   help="output type (default float32)")
    p.add_argument("--profile", default=None, help="decoder profile (GPU NaN patterns, e.g. torch-cuda)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print one line per code."""
    print("\n".join(describe.decode_lines(args.codes, args.format, dtype=args.dtype, profile=args.profile)))
    return 0
