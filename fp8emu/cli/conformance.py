"""``fp8emu conformance``: reproduce every recorded H200 table with its profile (``--live``: the CPU engines).

A ``--folder`` of recordings is checked before anything is compared: every
``.rle`` file must be named as the recordings are (see ``_NAMES``) and hold a
run-length table; a folder without tables, an unknown or malformed name, or an
unreadable file is a one-line error (exit status 2), never a traceback.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile

from .. import conformance, engines, readers
from .. import dask as fdask
from ..lab.study import dask_client
from . import scheduler_address, worker_count

_F = r"(e4m3fn|e5m2|e4m3fnuz|e5m2fnuz|e8m0fnu)"
_S = r"(f32|f16|bf16)"
#: File names of recorded tables, as ``conformance.recorded_tables`` reads them.
_NAMES = [
    r"cuda_decode_(e2m1|e2m3|e3m2|e4m3|e5m2|e8m0)_to_(f16|bf16|f32|f64)\.rle",
    rf"cuda_{_S}_(e4m3|e5m2)_(nosat|satfinite)\.rle",
    r"cuda_f32_e8m0_(rz|rp)_(nosat|satfinite)\.rle",
    rf"cuda_{_S}_(e2m1|e2m3|e3m2)_(rn|rz)\.rle",
    rf"(torch|jax)_{_S}_{_F}\.rle",
    r"triton_f32_(e4m3fn|e5m2)_(rtne|rtz)\.rle",
]
_EXAMPLE = "cuda_f32_e4m3_satfinite.rle, torch_f32_e5m2.rle, triton_f32_e5m2_rtz.rle, torch_tables.npz"


def register(sub, name, help_text):
    """Add the ``conformance`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Compare every recorded GPU table with its profile, exactly over all "
                                   "inputs, and print the Markdown table (exit 1 if any mismatches, 2 for a "
                                   "folder without valid tables).  With --live, run the CPU engines installed "
                                   "here (ONNX, ONNX Runtime, JAX, torch) and compare them with their profiles.")
    p.add_argument("--folder", default=None, help="folder of recorded tables (default: the package's copies)")
    p.add_argument("--live", action="store_true",
                   help="run the installed engines and compare them with their profiles and the spec")
    p.add_argument("--engines", default=None,
                   help=f"comma-separated engines for --live (default: all installed; known: "
                        f"{', '.join(engines.ENGINES)})")
    p.add_argument("--quiet", action="store_true", help="no progress bar (--live)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=worker_count, metavar="N",
                       help="also re-check every float32 cast table by brute force (all 2^32 inputs encoded) "
                            "on a local Dask cluster of N processes")
    group.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                       help="the same brute-force sweep on an existing dask.distributed scheduler")
    p.set_defaults(func=run)


def check_folder(folder):
    """Raise ValueError (one line) unless ``folder`` holds readable tables with known names."""
    if not os.path.isdir(folder):
        raise ValueError(f"{folder} is not a folder")
    files = sorted(os.listdir(folder))
    tables = [f for f in files if f.endswith(".rle") or f in ("torch_tables.npz", "torch_f64_midpoints.npz")]
    if not tables:
        raise ValueError(f"no recorded tables in {folder} (expected files such as {_EXAMPLE})")
    for fn in tables:
        path = os.path.join(folder, fn)
        if fn.endswith(".rle"):
            if not any(re.fullmatch(pat, fn) for pat in _NAMES):
                raise ValueError(f"{path}: unknown table name; recorded tables are named like {_EXAMPLE}")
            try:
                conformance.read_rle(path)
            except (ValueError, UnicodeDecodeError) as exc:
                msg = str(exc) if str(exc).startswith(path) else f"{path}: malformed run-length table ({exc})"
                raise ValueError(msg) from None
        else:
            readers.npz_headers(path)      # every member a checked .npy array, or one ValueError


def run(args) -> int:
    """Print the conformance table; 1 if any table (or live engine setting) is not reproduced."""
    if args.live:
        return _run_live(args)
    if args.engines is not None:
        raise ValueError("--engines applies to --live")
    if args.quiet:             # the recorded tables print no progress: it was ignored, silently
        raise ValueError("--quiet applies to --live (the recorded tables print no progress)")
    if args.folder is not None:
        check_folder(args.folder)
    try:
        rows = conformance.report(args.folder)
    except (KeyError, IndexError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"cannot read the recorded tables in {args.folder}: {type(exc).__name__}: {exc}") from None
    print(conformance.markdown_table(rows))
    if args.workers is not None or args.scheduler is not None:
        rows = rows + _sweep(args)
    bad = [r["table"] for r in rows if r["mismatches"]]
    if bad:
        print(f"\n{len(bad)} table(s) NOT reproduced: {', '.join(bad)}")
        return 1
    print(f"\nall {len(rows)} recorded tables reproduced bit-exactly by their profiles")
    return 0


def _progress(total, quiet):
    if quiet:
        return None, None
    try:
        from tqdm import tqdm
    except ImportError:   # progress lines instead of a bar
        return (lambda msg: print(f"  running {msg}", file=sys.stderr)), None
    bar = tqdm(total=total, desc="live engines", unit="format", file=sys.stderr, leave=False)

    def step(msg):
        bar.set_postfix_str(msg)
        bar.update(1)
    return step, bar


def _run_live(args) -> int:
    if args.folder is not None:
        raise ValueError("--folder applies to the recorded tables, not to --live")
    if args.workers is not None or args.scheduler is not None:     # ignored before, silently
        raise ValueError(f"{'--workers' if args.workers is not None else '--scheduler'} sweeps the recorded "
                         "float32 tables by brute force, not --live")
    have = engines.installed_engines()
    # each engine once (torch-cpu,torch-cpu ran and counted its settings twice)
    names = list(have) if args.engines is None else list(dict.fromkeys(e.strip() for e in args.engines.split(",")
                                                                       if e.strip()))
    if not names:
        raise ValueError(f"no engine installed; --live needs one of: {', '.join(engines.ENGINES)} "
                         "(pip install 'fp8emu[dev]' installs onnx, onnxruntime and jax)")
    for e in names:
        if e not in engines.ENGINES:
            raise ValueError(f"unknown engine {e!r}; valid: {', '.join(engines.ENGINES)}")
        if e not in have:
            raise ValueError(f"engine {e!r} is not installed (needs {', '.join(engines.ENGINES[e])})")
    print("Engines: " + "; ".join(f"{e} ({', '.join(f'{d} {v}' for d, v in have[e].items())}; profiles "
                                  f"{', '.join(p.name for p in engines.engine_profiles(e, have[e]))})"
                                  for e in names))
    stale = [s for s in engines.version_check({e: have[e] for e in names})]
    for engine, dist, v, proven in stale:
        print(f"version check: {engine}: {dist} {v} is installed, outside the versions its profile is proven "
              f"for ({proven}); re-prove it (pytest tests/test_engines.py -m exhaustive)")
    step, bar = _progress(sum(len(engines.ENGINE_FORMATS[e]) for e in names), args.quiet)
    try:
        rows = engines.live_report(names, progress=step)
    finally:
        if bar is not None:
            bar.close()
    print()
    print(engines.live_markdown(rows))
    bad = [r for r in rows if r["mismatches"] or r["decode_mismatches"]]
    if bad:
        print(f"\n{len(bad)} engine setting(s) NOT reproduced by their profile: " + "; ".join(
            f"{r['engine']} [{r['version']}] {r['format']} {r['setting']}" for r in bad))
        return 1
    print(f"\nall {len(rows)} engine settings reproduced bit-exactly by their profiles")
    return 0


def _sweep(args):
    """Brute-force re-check of the float32 cast tables on a Dask cluster (rows with a mismatch count)."""
    tables = [t for t in conformance.recorded_tables(args.folder) if t.kind == "cast" and t.src == "float32"]
    out = []
    print("\n| table (every float32 input encoded on the cluster) | profile | mismatches |\n|---|---|---|")
    with dask_client(workers=args.workers, scheduler=args.scheduler):
        for t in tables:
            n = fdask.float32_mismatches(t.path, t.fmt, profile=t.profile, rounding=t.rounding)
            print(f"| `{t.name}` | {t.profile} | {n} |", flush=True)
            out.append({"table": f"{t.name} (sweep)", "mismatches": n})
    return out
