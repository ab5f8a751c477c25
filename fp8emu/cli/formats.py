"""``fp8emu formats``: every registered format with its constants."""

from __future__ import annotations

from ..formats import format_names, format_table
from ..hifloat import hif8_summary


def register(sub, name, help_text):
    """Add the ``formats`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="List the registered formats: bits, exponent and mantissa widths, bias, "
                                   "max, smallest normal and subnormal, Inf/NaN/-0 codes (Markdown).")
    p.add_argument("--names", action="store_true", help="only the names, one per line")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the table (or the names)."""
    print("\n".join(format_names()) if args.names else format_table() + "\n\nAlso: " + hif8_summary())
    return 0
