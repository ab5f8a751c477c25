"""``fp8emu table FORMAT``: every code of a format with its bits and value."""

from __future__ import annotations

from .. import describe


def register(sub, name, help_text):
    """Add the ``table`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="List every code of FORMAT with its bits (sign exponent mantissa) "
                                   "and value.")
    p.add_argument("format", metavar="FORMAT", help="format name (see `fp8emu formats` / format_names())")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the code table."""
    print(describe.code_table(args.format))
    return 0
