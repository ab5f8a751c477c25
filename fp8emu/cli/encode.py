"""``fp8emu encode VALUE...``: code, bits, decoded value and error of each value.

Values may be negative without ``--`` (``fp8emu encode -nan -1e-3 -inf``):
this command's parser moves every token that is a value (a number, hex
float, ``inf``/``nan`` with a sign, or ``bits:PATTERN``) behind ``--``
before argparse reads the options, using only the public parser API.
"""

from __future__ import annotations

import re

from .. import describe
from ..rounding import ROUNDING_MODES, STOCHASTIC_MODES
from . import int_option

# A token that is a value even though it starts with "-": -1, -.5, -1e-3, -0x1.8p+3, -inf, -nan, -infinity.
_VALUE = re.compile(r"^-(\d|\.\d|0x|inf|nan)", re.I)


def values_behind_dashdash(args, takes_value):
    """Move value tokens behind ``--`` so that argparse never reads ``-nan`` as an option.

    ``takes_value`` is the set of option strings that consume the next token.

    Examples
    --------
    >>> values_behind_dashdash(["-nan", "--format", "e5m2", "-1e-3", "2"], {"--format"})
    ['--format', 'e5m2', '--', '-nan', '-1e-3', '2']
    """
    opts, vals = [], []
    i = 0
    while i < len(args):
        t = args[i]
        if t == "--":
            vals += args[i + 1:]
            break
        if not t.startswith("-") or _VALUE.match(t):
            vals.append(t)
        else:
            opts.append(t)
            if t in takes_value and i + 1 < len(args):
                opts.append(args[i + 1])
                i += 1
        i += 1
    return opts + (["--"] + vals if vals else [])


def values_first_parser(parser, takes_value):
    """Make ``parser`` (a subcommand's) pre-process its arguments with :func:`values_behind_dashdash`."""
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        return parse(None if args is None else values_behind_dashdash(list(args), takes_value), namespace)
    parser.parse_known_args = parse_known_args
    return parser


def register(sub, name, help_text):
    """Add the ``encode`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Encode each VALUE (read exactly, rounded once to --source-dtype, "
                                   "float64 unless given, then rounded once to the format) and print its "
                                   "code, bits, decoded value, absolute and relative error.")
    p.add_argument("values", nargs="+", metavar="VALUE",
                   help="decimal numbers (-1e-3), hex floats (0x1.8p+3), inf, -nan, or bits:0x3f800000 "
                        "(a bit pattern of --source-dtype); negative values need no --")
    opts = [
        p.add_argument("--format", "-f", default="e4m3fn", help="target format (default e4m3fn)"),
        p.add_argument("--rounding", "-r", default="rne", choices=ROUNDING_MODES, help="rounding mode (default rne)"),
        p.add_argument("--profile", default=None, help="implementation profile (e.g. cuda-satfinite)"),
        p.add_argument("--source-dtype", default=None, choices=list(describe.SOURCE_DTYPES),
                       help="type of the inputs (default float64; float32 for bits: inputs)"),
        p.add_argument("--seed", type=int_option(0), default=None, help="seed of the random bits (--rounding stochastic)"),
        p.add_argument("--sr-bits", type=int_option(1, 32), default=None, help="random bits for stochastic rounding (1..32)"),
    ]
    p.add_argument("--saturate", action="store_true", default=None,
                   help="clamp overflow and ±Inf to ±max (a --profile fixes its own saturation)")
    values_first_parser(p, {s for a in opts for s in a.option_strings})
    p.set_defaults(func=run)


def run(args) -> int:
    """Print one line per value."""
    stochastic = args.rounding in STOCHASTIC_MODES     # the four stochastic modes, not only "stochastic"
    if stochastic and args.seed is None:
        raise ValueError(f"--rounding {args.rounding} needs --seed (and optionally --sr-bits)")
    if not stochastic and (args.seed is not None or args.sr_bits is not None):
        raise ValueError(f"--seed and --sr-bits apply only to the stochastic roundings ({', '.join(STOCHASTIC_MODES)})")
    print("\n".join(describe.encode_lines(args.values, args.format, rounding=args.rounding,
                                          saturate=args.saturate, profile=args.profile,
                                          source_dtype=args.source_dtype, rng=args.seed, sr_bits=args.sr_bits)))
    return 0
