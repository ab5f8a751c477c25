"""``fp8emu study``: every tensor of a checkpoint under the recipe matrix; results.csv and reports."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..lab import study
from ..lab.recipes import DEFAULT_RECIPES, recipe_matrix
from . import positive_float, scheduler_address, worker_count

#: Output folder of ``fp8emu study --demo`` when ``--out`` is not given.
DEMO_OUT = "fp8emu-study-demo"


def register(sub, name, help_text):
    """Add the ``study`` subcommand."""
    p = sub.add_parser(
        name, help=help_text,
        description="Quantize every tensor of one or more checkpoints (.safetensors, .npz, .npy, or a "
                    "folder: a sharded .safetensors checkpoint, with or without its index, or .npy files) "
                    "with a matrix of recipes (plain casts per profile, per-tensor, row-wise, "
                    "1x128/128x128 blocks, MX, NVFP4, calibrated per-tensor scales) and write results.csv "
                    "(one row per tensor x recipe), report.md and a self-contained report.html. "
                    "Rerunning into the same --out skips what is already there.")
    p.add_argument("checkpoints", nargs="*", metavar="CHECKPOINT", help="checkpoint files or folders")
    p.add_argument("--demo", action="store_true",
                   help=f"study the small checkpoint shipped with fp8emu (default --out ./{DEMO_OUT})")
    p.add_argument("--out", help="output folder (required unless --demo)")
    p.add_argument("--recipes", action="append", metavar="NAMES",
                   help="recipe names or globs, comma-separated or repeated; 'all' for the whole matrix "
                        "(default: a 20-recipe selection, see --list-recipes)")
    p.add_argument("--include", action="append", metavar="PATTERN",
                   help="study only tensors matching (glob on the whole name, or a substring); repeatable")
    p.add_argument("--exclude", action="append", metavar="PATTERN", help="skip tensors matching; repeatable")
    p.add_argument("--chunk-mb", type=positive_float, default=study.DEFAULT_CHUNK_MB,
                   help=f"process large tensors in chunks of about this many MiB of float32 "
                        f"(default {study.DEFAULT_CHUNK_MB})")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=worker_count, metavar="N",
                       help="start a local Dask cluster of N worker processes (needs the [dask] extra)")
    group.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                       help="run on an existing dask.distributed scheduler, e.g. tcp://host:8786")
    p.add_argument("--no-report", action="store_true", help="write results.csv only")
    p.add_argument("--list-recipes", action="store_true", help="list the recipes and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=run)


def _list_recipes() -> int:
    for name, r in recipe_matrix().items():
        mark = "*" if name in DEFAULT_RECIPES else " "
        print(f"{mark} {name:28s} {r.description}")
    print("(* = run by default)")
    return 0


def _command_line(args) -> str:
    """The study's command as it can be typed again (for the reports' provenance)."""
    parts = ["fp8emu", "study", *args.checkpoints] + (["--demo"] if args.demo else [])
    for flag, value in (("--out", args.out), ("--chunk-mb", args.chunk_mb if args.chunk_mb != study.DEFAULT_CHUNK_MB
                                                           else None),
                        ("--workers", args.workers), ("--scheduler", args.scheduler)):
        if value is not None:
            parts += [flag, str(value)]
    for flag, values in (("--recipes", args.recipes), ("--include", args.include), ("--exclude", args.exclude)):
        for v in values or ():
            parts += [flag, v]
    return shlex.join(parts)


def run(args) -> int:
    """Run the study and print where the results went."""
    if args.list_recipes:
        return _list_recipes()
    paths = list(args.checkpoints)
    if args.demo:
        paths.append(str(study.demo_checkpoint()))
    if not paths:
        raise ValueError("give checkpoint files or folders, or --demo")
    out = args.out if args.out is not None else DEMO_OUT if args.demo else None   # "" was the demo's folder
    if out is None:
        raise ValueError("--out is required (the folder for results.csv and the reports)")
    recipes = None
    if args.recipes:
        recipes = [n.strip() for spec in args.recipes for n in spec.split(",") if n.strip()]
        if not recipes:
            raise ValueError(f"--recipes {' '.join(map(repr, args.recipes))} names no recipe (see --list-recipes)")
    # Every input is checked (paths, files, recipes, results.csv) before a cluster starts, and a
    # study with nothing left to do starts none.
    plan = study.plan_study(paths, out, recipes=recipes, include=args.include, exclude=args.exclude,
                            chunk_mb=args.chunk_mb, report=not args.no_report)
    workers, scheduler = (args.workers, args.scheduler) if plan.todo else (None, None)
    with study.dask_client(workers=workers, scheduler=scheduler) as client:
        res = study.execute_study(plan, progress=not args.quiet, client=client, report=not args.no_report,
                                  command=_command_line(args))
    if not args.quiet:
        out = Path(res["out"])
        print(f"{res['computed']} tensors studied, {res['skipped']} already in {out / 'results.csv'}"
              + (f"; {len(res['non_float'])} non-float tensors skipped" if res["non_float"] else "")
              + (f"; {res['duplicates']} duplicated rows dropped from results.csv" if res["duplicates"] else ""))
        print(f"results: {out / 'results.csv'}  ({len(res['rows'])} rows)")
        if not args.no_report:
            print(f"report:  {out / 'report.md'}  {out / 'report.html'}")
        sys.stdout.flush()
    return 0
