"""``fp8emu profiles``: the implementation profiles and what each reproduces."""

from __future__ import annotations

from ..profiles import get_profile, profile_names, versioned_names


def register(sub, name, help_text):
    """Add the ``profiles`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="List the implementation profiles (encode(..., profile=NAME)) with a "
                                   "description of the code path each reproduces.")
    p.add_argument("--names", action="store_true", help="only the names, one per line")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the profiles."""
    profiles = profile_names()
    if args.names:
        print("\n".join(profiles))
    else:
        width = max(map(len, profiles))
        print("\n".join(f"{n:<{width}}  {d}{_versions(n)}" for n, d in profiles.items()))
    return 0


def _versions(name) -> str:
    """`` [versions: ...]``: the library versions a profile is scoped to (its variants name theirs)."""
    if name in versioned_names():
        return ""
    ranges = get_profile(name).versions
    return f"  [versions: {'; '.join(map(str, ranges))}]" if ranges else ""
