"""The ``fp8emu`` command line.

Each subcommand lives in the module that owns its concept; that module
provides ``add_cli(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the handler.  Errors are one clear line on stderr
with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Modules that contribute subcommands, in the order they appear in --help.
_CLI_MODULES = [
    "conformance",
    "testing",
    "validate_gpu",
    "inspect_cmd",
    "plots",
    "train",
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="fp8emu", description="Bit-exact FP8 / narrow-float reference emulator and numerics lab.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _CLI_MODULES:
        importlib.import_module(f"fp8emu.{name}").add_cli(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``fp8emu`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader (e.g. `| head`) stopped early: not an error of ours.
        sys.stdout = open(os.devnull, "w")
        return 0
    except (ValueError, TypeError, OSError) as exc:
        print(f"fp8emu {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
