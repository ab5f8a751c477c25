"""``fp8emu grad-study``: same-state gradient probes of every recipe x stack; the findings (a)-(g), CSV and reports.

Needs the ``torch`` extra; without torch the command says so in one line.  Each cell of the study is
one task (:mod:`fp8emu.torch.study.grad`); its rows are written to ``cells/CELL_ID.json`` (with the
SHA-256 of the configuration, the cell and its rows) as it finishes, so a rerun into the same
``--out`` skips the cells already there.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from .. import readers
from ..lab import grad_study as report
from ..lab.store import atomic_write, check_out, digest, json_restore, json_safe, make_out
from ..lab.study import dask_client
from ..version import __version__
from . import scheduler_address, worker_count

try:   # torch is an optional extra: a missing torch is reported by run(), not at import
    import torch

    from ..torch.study import grad
    _MISSING = None
except ModuleNotFoundError as exc:   # pragma: no cover - the torch leg has torch
    if not (exc.name or "").split(".")[0] == "torch":
        raise
    _MISSING = exc

DEFAULT_OUT = "fp8emu-grad-study"
KINDS = ("probe", "bias", "eden", "operands", "ksweep", "width", "spike", "fork")


def register(sub, name, help_text):
    """Add the ``grad-study`` subcommand."""
    p = sub.add_parser(
        name, help=help_text,
        description="Probe the gradients of a small byte-level GPT's states under recipe x stack pairs of "
                    "fp8emu.torch against exact float32 and QAT references; test findings (a)-(g) of "
                    "published FP8/FP4 training papers; write one hashed file per cell (a rerun into the same "
                    "--out resumes), the CSV tables, findings.csv, figures and report.md/report.html. "
                    "Needs the torch extra.")
    p.add_argument("--out", help=f"output folder (default ./{DEFAULT_OUT}, or ./{DEFAULT_OUT}-quick with --quick)")
    p.add_argument("--quick", action="store_true", help="a one-layer model and small sizes (CI; about a minute)")
    p.add_argument("--kinds", help=f"comma-separated subset of the cell kinds: {', '.join(KINDS)} (default all)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=worker_count, metavar="N",
                       help="start a local Dask cluster of N worker processes, one cell per task")
    group.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                       help="run on an existing dask.distributed scheduler, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--list", action="store_true",
                   help="list the cells and exit (with --quick and --kinds only: nothing runs or is written)")
    p.add_argument("--quiet", action="store_true", help="no progress, no summary")
    p.set_defaults(func=run)


def _kinds(text):
    if text is None:
        return KINDS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in KINDS]
    if bad or not names:
        raise ValueError(f"unknown cell kind {bad[0] if bad else text!r}; the kinds are: {', '.join(KINDS)}")
    return names


def write_cell(out: Path, cfg_sha: str, cell: dict, rows: dict) -> Path:
    payload = json_safe({"config_sha256": cfg_sha, "cell": cell, "rows": rows})
    payload["sha256"] = digest({k: payload[k] for k in ("config_sha256", "cell", "rows")})
    path = out / "cells" / f"{grad.cell_id(cell)}.json"
    atomic_write(path, json.dumps(payload, sort_keys=True).encode("utf-8"))
    return path


def read_cell(path: Path, cfg_sha: str, cell: dict) -> dict:
    """The rows of a cell file, after checking its hash, its configuration and its cell."""
    try:
        payload = readers.read_json(path)
        body = {k: payload[k] for k in ("config_sha256", "cell", "rows")}
        stored = payload["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cell file {path} is unreadable ({type(exc).__name__}); delete it to rerun its cell") \
            from None
    if digest(body) != stored:
        raise ValueError(f"cell file {path} was modified (its SHA-256 does not match its contents); delete it "
                         "to rerun its cell")
    if body["config_sha256"] != cfg_sha:
        raise ValueError(f"cell file {path} belongs to another study configuration; use another --out or "
                         "delete the folder")
    if body["cell"] != json_safe(cell):
        # a file of this study under another cell's name (renamed or copied over): it said "another study
        # configuration; ... delete the folder", false, and the whole study's cells lost for one file
        held = grad.cell_id(body["cell"]) if isinstance(body["cell"], dict) and "kind" in body["cell"] else \
            repr(body["cell"])
        raise ValueError(f"cell file {path} holds cell {held} of this study, not {grad.cell_id(cell)} (renamed or "
                         "copied over?); delete it to rerun its cell")
    return json_restore(body["rows"])


def _progress(total, enabled):
    if not (enabled and total):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:   # pragma: no cover
        return None
    return tqdm(total=total, unit="cell", desc="fp8emu grad-study", file=sys.stderr)


def execute(out: Path, cfg, cells, *, client=None, progress=True) -> dict:
    """Run the cells without a valid file in ``out/cells``; ``{"rows": {cell_id: rows}, "computed", "skipped"}``."""
    cfg_d = cfg.as_dict()
    cfg_sha = digest(cfg_d)
    study = out / "study.json"
    if study.exists():
        try:
            theirs = readers.read_json(study)
        except ValueError as exc:     # parse_json's line names the file and the fault (a key twice, bad JSON)
            raise ValueError(f"{exc}; use another --out or delete the folder") from None
        if not (isinstance(theirs, dict) and isinstance(theirs.get("config"), dict) and "config_sha256" in theirs):
            raise ValueError(f"{out} holds a study.json that is not a grad-study's (another study's folder?); use "
                             "another --out")
        if theirs.get("config_sha256") != cfg_sha:
            raise ValueError(f"{out} holds a grad-study of another configuration; use another --out or delete it")
    else:
        atomic_write(study, json.dumps({"config": json_safe(cfg_d), "config_sha256": cfg_sha}, sort_keys=True,
                                        indent=1).encode("utf-8"))
    done, todo = {}, []
    for c in cells:
        path = out / "cells" / f"{grad.cell_id(c)}.json"
        if path.exists():
            done[grad.cell_id(c)] = read_cell(path, cfg_sha, c)
        else:
            todo.append(c)
    bar = _progress(len(todo), progress)
    try:
        if client is None:
            for c in todo:
                done[grad.cell_id(c)] = _finish(out, cfg_sha, c, grad.run_cell(cfg_d, c), bar)
        else:
            from distributed import as_completed
            futures = {client.submit(grad.run_cell, cfg_d, c, key=f"grad-study-{grad.cell_id(c)}-{id(c)}",
                                     pure=False): c for c in todo}
            for fut in as_completed(futures):
                c = futures[fut]
                done[grad.cell_id(c)] = _finish(out, cfg_sha, c, fut.result(), bar)
    finally:
        if bar is not None:
            bar.close()
    return {"rows": done, "computed": len(todo), "skipped": len(cells) - len(todo)}


def _finish(out, cfg_sha, cell, rows, bar):
    path = write_cell(out, cfg_sha, cell, rows)
    if bar is not None:
        bar.set_postfix_str(grad.cell_id(cell), refresh=False)
        bar.update(1)
    return read_cell(path, cfg_sha, cell)


def merge(cells, rows_by_id) -> dict:
    """``{table: rows}`` in the cells' planned order (the same tables, whatever order the cells finished in)."""
    tables = {}
    for c in cells:
        for kind, rows in rows_by_id[grad.cell_id(c)].items():
            tables.setdefault(kind, []).extend(rows)
    return tables


def study_cells(out: Path, cfg, rows_by_id: dict) -> tuple:
    """``(cells, {cell_id: rows})``: every cell of the study in ``out/cells`` (read and checked as a resume reads
    them), in the planned order, the invocation's ``rows_by_id`` among them.

    The tables are the whole study's: kinds share tables (``bias.csv``: bias and eden cells; ``operands.csv``:
    eden and operands cells), so tables of one invocation's ``--kinds`` rewrote them with that kind's rows
    alone (``--kinds eden`` into a finished study: findings (a), (b) and (g) "not run")."""
    cfg_sha, rows = digest(cfg.as_dict()), dict(rows_by_id)
    cells = grad.plan_cells(cfg)
    for c in cells:
        path = out / "cells" / f"{grad.cell_id(c)}.json"
        if grad.cell_id(c) not in rows and path.exists():
            rows[grad.cell_id(c)] = read_cell(path, cfg_sha, c)
    return [c for c in cells if grad.cell_id(c) in rows], rows


def _cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "cpu")
    except OSError:
        return platform.processor() or "cpu"


def provenance(cfg, argv, wall_s, workers, computed) -> dict:
    prov = {"command": "fp8emu " + shlex.join(argv), "date_utc": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M:%S"), "fp8emu": __version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {_cpu_name()}, {os.cpu_count()} logical cores",
            "threads_per_cell": 1, "workers": workers, "cells_computed_this_invocation": computed,
            "wall_s_this_invocation": round(wall_s, 1)}
    prov.update({f"config.{k}": v for k, v in cfg.as_dict().items()})
    return prov


def _writes():
    """What the study writes in ``--out`` (name, is_folder), checked before anything runs."""
    files = [f"{t}.csv" for t in report.TABLES] + ["findings.csv", "provenance.csv", "report.md", "report.html"]
    return [("cells", True), ("figures", True), ("study.json", False), *((f, False) for f in files)]


def run(args) -> int:
    """Plan (checking every input), run the missing cells, write the tables, findings and report."""
    if _MISSING is not None:
        raise ValueError(f"grad-study needs torch (the torch extra: pip install 'fp8emu[torch]'): {_MISSING}")
    t0 = time.perf_counter()
    kinds = _kinds(args.kinds)
    cfg = grad.QUICK if args.quick else grad.FULL
    cells = [c for c in grad.plan_cells(cfg) if c["kind"] in kinds]
    if args.list:
        # the listing runs and writes nothing: these options were ignored, silently
        given = [o for o, v in (("--out", args.out), ("--workers", args.workers), ("--scheduler", args.scheduler),
                                ("--quiet", args.quiet)) if v not in (None, False)]
        if given:
            raise ValueError(f"--list only prints the cells (nothing runs or is written): {', '.join(given)} would "
                             "be ignored; leave it out")
        for c in cells:
            print(grad.cell_id(c))
        print(f"{len(cells)} cells")
        return 0
    if args.out is not None and not args.out.strip():
        # quoted as given: '   ' was quoted ''
        raise ValueError(f"--out {args.out!r} names no folder; leave --out out for the default "
                         f"./{DEFAULT_OUT}{'-quick' if args.quick else ''}")
    out = Path(args.out if args.out is not None else DEFAULT_OUT + ("-quick" if args.quick else ""))
    make_out(check_out(out, _writes(), (("cells", ".json"), ("figures", ".png"))))
    with dask_client(workers=args.workers, scheduler=args.scheduler) as client:
        res = execute(out, cfg, cells, client=client, progress=not args.quiet)
    # two words, quoted by provenance: "--kinds probe, bias" was recorded unquoted, a command that fails
    argv = ["grad-study"] + (["--quick"] if args.quick else []) + (["--kinds", args.kinds] if args.kinds else [])
    prov = provenance(cfg, argv, time.perf_counter() - t0, args.workers or args.scheduler or 1, res["computed"])
    present, rows = study_cells(out, cfg, res["rows"])
    report.write_report(merge(present, rows), out, prov)
    if not args.quiet:
        print(f"{res['computed']} cells computed, {res['skipped']} already in {out / 'cells'}; "
              f"{time.perf_counter() - t0:.1f} s")
        for r in report.findings(report.read_tables(out)):
            print(f"  ({r['finding']}) {r['verdict']:18s} {r['measured']}")
        print(f"report: {out / 'report.md'}  {out / 'report.html'}")
        sys.stdout.flush()
    return 0
