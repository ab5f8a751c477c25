"""``fp8emu encode VALUE...``: code, bits, decoded value and error of each value."""

from __future__ import annotations

import re

from .. import describe
from ..rounding import ROUNDING_MODES


def register(sub, name, help_text):
    """Add the ``encode`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Encode each VALUE (read exactly as float64, rounded once) and print "
                                   "its code, bits, decoded value, absolute and relative error.")
    # Let negative numbers in exponent notation (-1e-3) and -inf be values, not options.
    p._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.I)
    p.add_argument("values", nargs="+", metavar="VALUE", help="decimal numbers, inf or nan")
    p.add_argument("--format", "-f", default="e4m3fn", help="target format (default e4m3fn)")
    p.add_argument("--rounding", "-r", default="rne", choices=ROUNDING_MODES,
                   help="rounding mode (default rne)")
    p.add_argument("--saturate", action="store_true", help="clamp overflow and ±Inf to ±max")
    p.add_argument("--profile", default=None, help="implementation profile (e.g. cuda-satfinite)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print one line per value."""
    print("\n".join(describe.encode_lines(args.values, args.format, rounding=args.rounding,
                                          saturate=args.saturate, profile=args.profile)))
    return 0
