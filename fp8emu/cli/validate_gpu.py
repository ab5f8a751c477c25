"""``fp8emu validate-gpu``: compare the GPU's casts with the profiles."""

from __future__ import annotations

from .. import validate_gpu


def register(sub, name, help_text):
    """Add the ``validate-gpu`` subcommand."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("--limit", type=int, default=None, help="validate only the first N float32 patterns")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the validation."""
    validate_gpu.validate(limit=args.limit)
    return 0
