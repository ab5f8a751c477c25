"""``fp8emu golden``: write golden vectors, run-length tables or GEMM cases for kernel tests.

The output type follows ``--out``'s extension (case-insensitive; the file is
written at exactly that path): ``.npz``, ``.json``, a C/C++/CUDA header
``.h``/``.hpp``/``.cuh``, or ``.rle`` (every input of the source type, in
run-length form); ``--scaled-mm`` writes GEMM cases to an ``.npz``.  The
formats are described in :mod:`fp8emu.testing.golden`.
"""

from __future__ import annotations

import os

from ..rounding import ROUNDING_MODES
from .. import dask as fdask
from ..lab.study import dask_client
from ..testing import golden
from . import int_option, output_file, scheduler_address, worker_count


def register(sub, name, help_text):
    """Add the ``golden`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Write golden inputs with their expected codes (or a GEMM case file) for "
                                   "another implementation's tests. --out decides the file type: .npz, .json, "
                                   ".h/.hpp/.cuh (C/C++/CUDA header), .rle (run-length table of every input).")
    p.add_argument("--format", default=None, help="target format, e.g. e4m3fn (required unless --scaled-mm)")
    # None where not given, so that an option the chosen output does not use is refused, not ignored
    p.add_argument("--profile", default=None, help="implementation profile (default: ocp)")
    p.add_argument("--source-dtype", default=None, choices=list(golden.SOURCE_DTYPES),
                   help="type of the inputs (default: float32)")
    p.add_argument("--rounding", default=None, choices=ROUNDING_MODES, help="rounding mode (default: rne)")
    p.add_argument("--saturate", action="store_true", default=None,
                   help="clamp overflow and ±Inf to ±max (a --profile fixes its own saturation)")
    p.add_argument("--seed", type=int_option(0), default=None,
                   help="seed of the random bits (stochastic rounding) or of the GEMM operands (--scaled-mm)")
    p.add_argument("--sr-bits", type=int_option(1, 32), default=None, help="random bits per input for stochastic rounding (1..32)")
    p.add_argument("--exhaustive", action="store_true",
                   help="all 2^16 float16/bfloat16 inputs instead of the edge cases")
    p.add_argument("--name", default=None, help="identifier prefix in a C header (default: the file's stem)")
    p.add_argument("--scaled-mm", action="store_true",
                   help="write scaled_mm cases (operands, scales, bias, expected outputs per accumulator)")
    p.add_argument("--a-format", default=None, help="--scaled-mm: format of A (default e4m3fn)")
    p.add_argument("--b-format", default=None, help="--scaled-mm: format of B (default e4m3fn)")
    p.add_argument("--accumulators", nargs="+", default=None, metavar="ACC",
                   help="--scaled-mm: accumulators to give expected outputs for (default: hopper hopper-fast; "
                        "also fp32, exact)")
    p.add_argument("--out", required=True, type=output_file(), help="output file; its extension picks the type")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=worker_count, metavar="N",
                       help=".rle float32 tables: encode all 2^32 inputs on a local Dask cluster of N processes")
    group.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                       help=".rle float32 tables: encode all 2^32 inputs on an existing dask.distributed scheduler")
    p.set_defaults(func=run)


#: --out extensions and what each writes (the error for any other lists them all).
OUT_TYPES = {".npz": "NumPy vectors", ".json": "JSON vectors", ".h": "C header", ".hpp": "C++ header",
             ".cuh": "CUDA header", ".rle": "run-length table of every input"}


def run(args) -> int:
    """Write the file and say what was written."""
    ext = os.path.splitext(args.out)[1].lower()
    if ext not in OUT_TYPES:
        raise ValueError(f"--out {args.out!r}: the extension picks the file type; accepted: "
                         + ", ".join(f"{e} ({what})" for e, what in OUT_TYPES.items())
                         + "; with --scaled-mm: .npz")
    vector_options = {"--format": args.format, "--profile": args.profile, "--source-dtype": args.source_dtype,
                      "--rounding": args.rounding, "--saturate": args.saturate, "--sr-bits": args.sr_bits,
                      "--exhaustive": args.exhaustive or None, "--name": args.name, "--workers": args.workers,
                      "--scheduler": args.scheduler}
    gemm_options = {"--a-format": args.a_format, "--b-format": args.b_format, "--accumulators": args.accumulators}
    # each was ignored, silently, by the output that does not use it (the file said nothing of it)
    unused = [k for k, v in (vector_options if args.scaled_mm else gemm_options).items() if v is not None]
    if unused:
        raise ValueError(f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply to "
                         + ("--scaled-mm (GEMM cases: --a-format, --b-format, --accumulators, --seed)"
                            if args.scaled_mm else "golden vectors (--a-format, --b-format and --accumulators "
                                                   "are --scaled-mm's)"))
    if args.name is not None and ext not in (".h", ".hpp", ".cuh"):
        raise ValueError(f"--name prefixes a C header's identifiers; {ext} files have none")
    if args.scaled_mm:
        if ext != ".npz":
            raise ValueError(f"--scaled-mm writes an .npz file, got {args.out!r}")
        # each accumulator once (hopper hopper listed it twice in the file)
        accumulators = tuple(dict.fromkeys(args.accumulators or ("hopper", "hopper-fast")))
        cases = golden.save_scaled_mm_cases(args.out, seed=0 if args.seed is None else args.seed,
                                            a_format=args.a_format or "e4m3fn", b_format=args.b_format or "e4m3fn",
                                            accumulators=accumulators)
        print(f"wrote {len(cases['shapes'])} scaled_mm cases ({cases['a_format']} x {cases['b_format']}; "
              f"accumulators {', '.join(cases['accumulators'].tolist())}) to {args.out}")
        return 0
    if args.format is None:
        raise ValueError("--format is required (or pass --scaled-mm)")
    args.profile = args.profile or "ocp"
    args.source_dtype = args.source_dtype or "float32"
    args.rounding = args.rounding or "rne"
    if (args.workers is not None or args.scheduler is not None) and ext != ".rle":
        raise ValueError("--workers/--scheduler apply to .rle tables (the exhaustive float32 sweep)")
    if ext == ".rle":
        if args.seed is not None or args.sr_bits is not None or args.exhaustive:
            raise ValueError("a .rle table covers every input already; --seed, --sr-bits and --exhaustive "
                             "do not apply")
        options = dict(source_dtype=args.source_dtype, profile=args.profile, rounding=args.rounding,
                       saturate=args.saturate)
        if args.workers is not None or args.scheduler is not None:
            if args.source_dtype != "float32":
                raise ValueError("--workers/--scheduler sweep float32 inputs; 16-bit tables need no cluster")
            with dask_client(workers=args.workers, scheduler=args.scheduler):
                options["runs"] = fdask.float32_runs(args.format, profile=args.profile, rounding=args.rounding,
                                                     saturate=args.saturate)
        runs = golden.save_rle(args.out, args.format, **options)
        print(f"wrote the {args.format} table of every {args.source_dtype} input ({runs} runs, profile "
              f"{args.profile}) to {args.out}")
        return 0
    g = golden.save_golden(args.out, args.format, name=args.name, source_dtype=args.source_dtype,
                           profile=args.profile, rounding=args.rounding, saturate=args.saturate, seed=args.seed,
                           sr_bits=args.sr_bits, exhaustive=args.exhaustive)
    print(f"wrote {g['codes'].size} {g['format']} vectors ({g['source_dtype']} inputs, profile {g['profile']}"
          f"{', with random bits' if 'random_bits' in g else ''}) to {args.out}")
    return 0
