"""The ``fp8emu`` command line.

One module per command in this package.  Each defines ``register(sub, name,
help)``, which adds its parser, and ``run(args) -> int``.  Only the module
of the command being run is imported, so ``fp8emu table e4m3fn`` loads
neither matplotlib nor the GEMM code.  Bad input (``ValueError``,
``TypeError``, ``OSError``: what the library raises for a wrong value, a
wrong kind of value, or a file it cannot use) is one line
``fp8emu COMMAND: error: ...`` on stderr and exit status 2; with the
environment variable ``FP8EMU_TRACEBACK=1`` it is raised with its traceback
instead.  An option argparse refuses (an unknown choice, a negative
``--seed``: see :func:`int_option`) is its usage line and one
``error: argument --NAME: ...`` line, also status 2; anything else is a bug
and keeps its traceback.

Examples
--------
>>> list(COMMANDS)[:3]
['encode', 'decode', 'formats']
>>> main(["table", "e2m1fn"])                 # doctest: +ELLIPSIS
# e2m1fn: 16 codes
code  bits  value
...
0
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .. import parallel
from ..version import __version__

__all__ = ["main", "build_parser", "COMMANDS", "int_option", "positive_float", "worker_count",
           "scheduler_address", "output_file"]

#: command name -> (module in fp8emu.cli, one-line help), in --help order.
COMMANDS = {
    "encode": ("encode", "encode values and show code, bits, value and error"),
    "decode": ("decode", "show the value of codes in any output type"),
    "formats": ("formats", "list the formats with their constants and special codes"),
    "profiles": ("profiles", "list the implementation profiles (GPU and library code paths)"),
    "presets": ("presets", "list the matrix-instruction presets and the evidence behind each"),
    "cpu-order": ("cpu_order", "which summation order torch's CPU GEMMs take on this machine (revealed or recorded)"),
    "table": ("table", "list every code of a format with its bits and value"),
    "conformance": ("conformance", "exact conformance of the profiles with the recorded H200 tables"),
    "golden": ("golden", "write golden vectors with expected codes for kernel tests"),
    "validate-gpu": ("validate_gpu", "compare torch/Triton/JAX GPU casts with the profiles (needs CUDA)"),
    "figures": ("figures", "regenerate the numerics-lab figures (PNG)"),
    "train-demo": ("train_demo", "train a NumPy MLP in float32 and emulated FP8; compare"),
    "study": ("study", "study a checkpoint's tensors under FP8/MX/NVFP4 recipes; results.csv and reports"),
    "attention-study": ("attention_study", "emulated FP8 attention error vs context, promotion, P pre-scale, scales"),
    "train-study": ("train_study", "train a byte-level GPT under every fp8emu.torch recipe x stack; CSV and reports"),
    "grad-study": ("grad_study", "same-state gradient probes of every recipe x stack; findings (a)-(g), CSV, report"),
}


def int_option(minimum=None, maximum=None):
    """An argparse ``type`` for an integer option in ``minimum..maximum``.

    argparse reports a refusal as ``argument --NAME: ...``, so the message
    names the option at fault and what it accepts.

    Examples
    --------
    >>> int_option(0)("7"), int_option(1, 32).__name__
    (7, 'integer')
    """
    if minimum is not None and maximum is not None:
        want = f"an integer in {minimum}..{maximum}"
    elif minimum is not None:
        want = {0: "a non-negative integer (>= 0)", 1: "a positive integer (>= 1)"}.get(
            minimum, f"an integer >= {minimum}")
    else:
        want = "an integer"

    def integer(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            raise argparse.ArgumentTypeError(f"expected {want}, got {v}")
        return v
    return integer


def output_file(*suffixes):
    """An argparse ``type`` for a file to write: not a folder, in a folder that exists, and (when
    ``suffixes`` are given) with one of them, so a bad path is refused before any work is done.

    Examples
    --------
    >>> output_file(".png")("fig.png"), output_file(".png").__name__
    ('fig.png', 'output_file')
    """
    def output_file(text):
        path = Path(text)
        if not text or path.is_dir() or text.endswith(("/", os.sep)):
            raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name"
                                             + (f" ending in {' or '.join(suffixes)}" if suffixes else ""))
        folder = path.resolve().parent       # through a link: the folder its target would be written in
        if not folder.is_dir():
            # "the folder of 'afile/x.json' does not exist" of a file, and of a link's target as if of '.'
            raise argparse.ArgumentTypeError(
                f"the folder of {text!r}" + (f", {str(folder)!r}," if str(folder) != str(path.parent) else "")
                + (" is a file, not a folder" if folder.exists() else " does not exist"))
        if suffixes and path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text!r} must end in {' or '.join(suffixes)}")
        return text
    return output_file


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line gives one line on stderr (no usage lines before it), status 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def positive_float(text):
    """An argparse ``type`` for a finite number > 0 (``--chunk-mb``).

    Examples
    --------
    >>> positive_float("2.5")
    2.5
    """
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite positive number, got {text}")
    return v


def worker_count(text):
    """An argparse ``type`` for ``--workers``: an int in 1..:func:`fp8emu.parallel.max_local_workers`.

    Examples
    --------
    >>> worker_count("4")
    4
    """
    top = parallel.max_local_workers()
    try:
        return parallel.check_workers(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in 1..{top} (four per core here, at least 8: "
                                         f"a local cluster starts one process per worker), got {text!r}") from None


def scheduler_address(text):
    """An argparse ``type`` for ``--scheduler``: ``[scheme://]host[:port]`` (see :func:`fp8emu.parallel.check_scheduler_address`).

    Examples
    --------
    >>> scheduler_address("tcp://127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    """
    try:
        return parallel.check_scheduler_address(text, what="address")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _version() -> str:
    # The one version string (fp8emu.version): setuptools reads it into the package metadata,
    # and the documentation's conf.py shows it.
    return __version__


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only ``command``'s module is imported to build its options.

    Examples
    --------
    >>> p = build_parser("table")
    >>> p.parse_args(["table", "e2m1fn"]).format
    'e2m1fn'
    """
    parser = _Parser(
        prog="fp8emu", description="Bit-exact FP8 / narrow-float reference emulator and numerics lab.")
    parser.add_argument("--version", action="version", version=f"fp8emu {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if name == command:
            importlib.import_module(f"{__name__}.{module}").register(sub, name, help_text)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``fp8emu`` command; returns the exit status.

    Examples
    --------
    >>> main(["encode", "300", "--format", "e4m3fn"])    # doctest: +ELLIPSIS
    input ...
    0
    >>> main(["table", "e9m9"])                          # bad input: one line on stderr, status 2
    2
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help, --version
            raise
        return 2                   # argparse printed the usage and its one error line
    if command is None or not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader (e.g. `| head`) stopped early: not an error of ours.
        sys.stdout = open(os.devnull, "w")
        return 0
    except (ValueError, TypeError, OSError, ArithmeticError) as exc:
        if os.environ.get("FP8EMU_TRACEBACK", "") not in ("", "0"):
            raise
        print(f"fp8emu {command}: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:   # sizes are bounded up front; this is the last resort, still one line
        print(f"fp8emu {command}: error: out of memory; use smaller sizes", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fp8emu {command}: interrupted", file=sys.stderr)
        return 130
