"""``fp8emu conformance``: reproduce every recorded H200 table with its profile (``--live``: the CPU engines)."""

from __future__ import annotations

import sys

from .. import conformance, engines


def register(sub, name, help_text):
    """Add the ``conformance`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Compare every recorded GPU table with its profile, exactly over all "
                                   "inputs, and print the Markdown table (exit 1 if any mismatches).  With "
                                   "--live, run the CPU engines installed here (ONNX, ONNX Runtime, JAX, "
                                   "torch) and compare them with their profiles instead.")
    p.add_argument("--folder", default=None, help="folder of recorded tables (default: the package's copies)")
    p.add_argument("--live", action="store_true",
                   help="run the installed engines and compare them with their profiles and the spec")
    p.add_argument("--engines", default=None,
                   help=f"comma-separated engines for --live (default: all installed; known: "
                        f"{', '.join(engines.ENGINES)})")
    p.add_argument("--quiet", action="store_true", help="no progress bar (--live)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the conformance table; 1 if any table (or live engine setting) is not reproduced."""
    if args.live:
        return _run_live(args)
    if args.engines is not None:
        raise ValueError("--engines applies to --live")
    rows = conformance.report(args.folder)
    print(conformance.markdown_table(rows))
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
    have = engines.installed_engines()
    names = list(have) if args.engines is None else [e.strip() for e in args.engines.split(",") if e.strip()]
    if not names:
        raise ValueError(f"no engine installed; --live needs one of: {', '.join(engines.ENGINES)} "
                         "(pip install 'fp8emu[dev]' installs onnx, onnxruntime and jax)")
    for e in names:
        if e not in engines.ENGINES:
            raise ValueError(f"unknown engine {e!r}; valid: {', '.join(engines.ENGINES)}")
        if e not in have:
            raise ValueError(f"engine {e!r} is not installed (needs {', '.join(engines.ENGINES[e])})")
    print("Engines: " + "; ".join(f"{e} ({', '.join(f'{d} {v}' for d, v in have[e].items())})" for e in names))
    stale = [s for s in engines.version_check({e: have[e] for e in names})]
    for engine, dist, v, proven in stale:
        print(f"version check: {engine}: {dist} {v} is installed, its profile was proven on {proven}; "
              "re-prove it (pytest tests/test_engines.py -m exhaustive)")
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
