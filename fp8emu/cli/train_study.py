"""``fp8emu train-study``: a byte-level GPT trained under every recipe x stack of fp8emu.torch; CSV and reports.

Needs the ``torch`` extra; without torch the command says so in one line.
Every input (names, sizes, corpus, earlier result files) is checked before
a run starts.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import platform
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..gemm.torch_cpu import cpu_path
from .. import readers
from ..lab.store import check_out
from ..lab.study import dask_client
from ..version import __version__
from . import int_option, positive_float, scheduler_address, worker_count

try:   # torch is an optional extra: a missing torch is reported by run(), not at import
    import torch

    from ..lab import lm_forks as forks
    from ..lab import lm_study as report
    from ..torch.study import infer, runs
    from ..torch.study.corpus import load_corpus
    from ..torch.study.train import BASELINES, TrainConfig, evaluated_windows
    _MISSING = None
except ModuleNotFoundError as exc:   # pragma: no cover - the torch leg has torch
    if not (exc.name or "").split(".")[0] == "torch":
        raise
    _MISSING = exc

#: Output folder when ``--out`` is not given.
DEFAULT_OUT = "fp8emu-train-study"
_SIZES = ("n_layer", "d_model", "n_head", "seq_len", "batch")


def register(sub, name, help_text):
    """Add the ``train-study`` subcommand."""
    p = sub.add_parser(
        name, help=help_text,
        description="Train a small byte-level GPT on Python's pydoc_data documentation text (or --corpus) "
                    "in fp32, bf16 and every valid recipe x stack of fp8emu.torch, several seeds each; write "
                    "one hashed result file per run (a rerun into the same --out resumes), runs.csv, "
                    "curves.csv, gaps.csv, diagnostics.csv, inference.csv, figures and report.md/report.html. "
                    "The defaults are the committed study of docs/guides/lm-study.md (every valid pair, its model "
                    "and schedule): hours of CPU time; --quick is a check of about two minutes. --forks starts "
                    "every run from one float32 checkpoint (the committed fork study; with --quick its CI size). "
                    "Needs the torch extra.")
    p.add_argument("--out", help=f"output folder (default ./{DEFAULT_OUT}, or ./{DEFAULT_OUT}-quick with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="a one-layer model, 24 steps, 2 seeds, te-delayed@h100 and te-nvfp4@b200 (CI; under 2 minutes)")
    p.add_argument("--forks", action="store_true",
                   help="the fork design: every run starts from one float32 checkpoint (seed 0) and trains the "
                        f"last steps from it (default: the committed fork study, {_forks_text()}); contrasts "
                        "between runs then hold only what those steps did")
    p.add_argument("--fork-at", type=int_option(1), metavar="S",
                   help="fork at step S (implies --forks; S below --steps)")
    p.add_argument("--recipes", help="comma-separated recipe names, 'all' (default) or 'none' (baselines only)")
    p.add_argument("--stacks", help="comma-separated GPU stacks or 'all' (default); invalid pairs are left out")
    p.add_argument("--pairs", help="comma-separated recipe@stack pairs to run instead of recipes x stacks")
    p.add_argument("--baselines", help="comma-separated subset of fp32,bf16 (default both)")
    p.add_argument("--seeds", type=int_option(1, 30),
                   help="number of seeds, 0..N-1, of every run (default: 3 per recipe x stack and 5 per baseline, "
                        "as the committed study; 2 with --quick)")
    p.add_argument("--baseline-seeds", type=int_option(1, 30),
                   help="number of seeds of the fp32/bf16 baselines (default: 5, or --seeds when given; "
                        "2 with --quick)")
    for opt, (where, key), text in _SIZE_OPTIONS:
        p.add_argument(opt, type=int_option(1), help=f"{text} ({_default_text(where, key)})")
    p.add_argument("--lr", type=positive_float, help=f"peak learning rate ({_default_text('train', 'lr')})")
    p.add_argument("--corpus", help="a UTF-8 text file instead of Python's pydoc_data topics (the default)")
    p.add_argument("--no-diagnostics", action="store_true",
                   help="do not record fp8emu.torch.diagnostics (default: the first seed of each recipe records them)")
    p.add_argument("--no-inference", action="store_true", help="skip the inference perplexity table")
    p.add_argument("--infer-windows", type=int_option(1),
                   help=f"validation windows for the inference table ({_default_text(None, 'infer_windows')})")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--workers", type=worker_count, metavar="N",
                       help="start a local Dask cluster of N worker processes, one run per task")
    group.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                       help="run on an existing dask.distributed scheduler, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--list", action="store_true",
                   help="list the runs the study would make and exit (nothing trains or is written)")
    p.add_argument("--no-report", action="store_true", help="write the result files and CSV only")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: write the tables and report of the runs already in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=run)


#: The size and schedule options: (option, (preset part, field), help text).
_SIZE_OPTIONS = (("--steps", ("train", "steps"), "training steps per run"),
                 ("--n-layer", ("model", "n_layer"), "decoder blocks"),
                 ("--d-model", ("model", "d_model"), "model width"),
                 ("--n-head", ("model", "n_head"), "attention heads"),
                 ("--seq-len", ("model", "seq_len"), "bytes per training window"),
                 ("--batch", ("model", "batch"), "windows per step"),
                 ("--eval-every", ("train", "eval_every"), "steps between validation evaluations"))


def _preset_value(preset, where, key):
    return getattr(preset[where], key) if where else preset[key]


def _forks_text():
    """``step S of N; with --quick, step S of N`` from the fork presets (so --help cannot drift)."""
    if _MISSING is not None:    # pragma: no cover - without torch the presets cannot be imported
        return "see the lm-study guide"
    full, quick = runs.FORKS["train"], runs.QUICK_FORKS["train"]
    return f"step {full.fork_at} of {full.steps}; with --quick, step {quick.fork_at} of {quick.steps}"


def _default_text(where, key):
    """``default N, the committed study's; M with --quick`` from the presets (so --help cannot drift)."""
    if _MISSING is not None:    # pragma: no cover - without torch the presets cannot be imported
        return "default: see the lm-study guide"
    return (f"default {_preset_value(runs.STUDY, where, key)}, the committed study's; "
            f"{_preset_value(runs.QUICK, where, key)} with --quick")


def _names(text, known, what):
    if text is not None and text.strip() == "none":
        return ()
    known = list(known())
    if text is None or text.strip() == "all":
        return tuple(known)
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ValueError(f"unknown {what} {bad[0] if bad else text!r}; the {what}s are: {', '.join(known)} "
                         f"(comma-separated), 'all' or 'none'")
    return names


def study_config(args):
    """The :class:`~fp8emu.torch.study.runs.StudyConfig` of the command's options."""
    forks = args.forks or args.fork_at is not None
    base = dict((runs.QUICK_FORKS if forks else runs.QUICK) if args.quick else (runs.FORKS if forks else runs.STUDY))
    mc = dataclasses.replace(base["model"],
                             **{k: getattr(args, k) for k in _SIZES if getattr(args, k) is not None})
    tc = base["train"]
    changes = {k: getattr(args, k) for k in ("steps", "eval_every", "lr", "fork_at") if getattr(args, k) is not None}
    if "steps" in changes:
        # a tenth of the steps, at most the preset's cap (TrainConfig's 30 warm-up steps; --quick's 4)
        cap = tc.warmup if args.quick else TrainConfig().warmup
        changes["warmup"] = min(cap, max(1, changes["steps"] // 10))
    steps = changes.get("steps", tc.steps)
    if forks and steps < 2:
        # "give --fork-at S below 1" asked for what --fork-at refuses: a fork is at step 1 or later and
        # trains at least one step after it
        raise ValueError(f"--forks needs --steps 2 or more (a fork at step S >= 1 then trains at least one step), "
                         f"got --steps {steps}")
    if forks and args.fork_at is None and tc.fork_at >= steps:
        # the preset's fork step, not one the user gave: name the options, not the field
        raise ValueError(f"--forks forks at step {tc.fork_at} (the preset's), which needs --steps above "
                         f"{tc.fork_at}, got --steps {steps}; give --fork-at S below {steps}")
    if args.fork_at is not None and args.fork_at >= steps:
        # TrainConfig's "fork_at must be ... from 0 (no fork)": a field, and a 0 that --fork-at refuses
        raise ValueError(f"--fork-at {args.fork_at} needs --steps above {args.fork_at}, got --steps {steps}"
                         f"{'' if 'steps' in changes else ' (the preset' + chr(39) + 's)'}; give --fork-at S from 1 "
                         f"to {steps - 1}")
    tc = dataclasses.replace(tc, **changes)
    quick_pairs = args.quick and not (args.recipes or args.stacks or args.pairs)
    recipes = tuple(dict.fromkeys(r for r, _ in base["pairs"])) if quick_pairs \
        else _names(args.recipes, runs.recipe_names, "recipe")
    if args.stacks is not None and not recipes:
        # --recipes none runs baselines only: the stacks were ignored, unchecked ("--stacks bogus" was taken)
        raise ValueError(f"--stacks {args.stacks!r} chooses the stacks of the recipes, which --recipes none leaves "
                         "out (baselines only): it would be ignored; leave it out")
    stacks = tuple(dict.fromkeys(st for _, st in base["pairs"])) if quick_pairs \
        else () if not recipes else _names(args.stacks, runs.stack_names, "stack")
    baselines = _names(args.baselines, lambda: BASELINES, "baseline") if args.baselines is not None else BASELINES
    seeds = tuple(range(args.seeds)) if args.seeds else base["seeds"]
    baseline_seeds = tuple(range(args.baseline_seeds)) if args.baseline_seeds else \
        seeds if args.seeds else base["baseline_seeds"]
    pairs = base["pairs"] if quick_pairs else ()
    if args.pairs:
        if args.recipes or args.stacks:
            raise ValueError("give --pairs or --recipes/--stacks, not both")
        words = [w.strip() for w in args.pairs.split(",") if w.strip()]
        if not words or any(w.count("@") != 1 for w in words):
            raise ValueError(f"--pairs takes recipe@stack items separated by commas, got {args.pairs!r}")
        # each side stripped as --recipes and --stacks strip their names ("te-delayed @ h100" was "unknown
        # recipe 'te-delayed '" beside a list that names te-delayed)
        pairs = tuple(tuple(p.strip() for p in w.split("@")) for w in words)
        recipes = _names(",".join(dict.fromkeys(r for r, _ in pairs)), runs.recipe_names, "recipe")
        stacks = _names(",".join(dict.fromkeys(st for _, st in pairs)), runs.stack_names, "stack")
    return runs.StudyConfig(model=mc, train=tc, recipes=recipes, stacks=stacks, seeds=seeds, baselines=baselines,
                            corpus=args.corpus, diagnostics=base.get("diagnostics", True) and not args.no_diagnostics,
                            pairs=pairs,
                            baseline_seeds=baseline_seeds)


def infer_windows(args) -> int:
    """``--infer-windows``, or the preset's (64, the committed study's; 32 with --quick)."""
    if args.infer_windows is not None:
        return args.infer_windows
    return (runs.QUICK if args.quick else runs.STUDY)["infer_windows"]


def _argv(args) -> list:
    """The command's options as given (those that differ from their defaults), for the provenance."""
    words = ["train-study"]
    for k, v in vars(args).items():
        if k in ("func", "command") or v is None or v is False:
            continue
        words.append(f"--{k.replace('_', '-')}")
        if v is not True:
            words.append(str(v))
    return words


def _cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "cpu")
    except OSError:
        return platform.processor() or "cpu"


def provenance(cfg, argv, wall_s, workers) -> dict:
    c = load_corpus(cfg.corpus)
    prov = {"command": "fp8emu " + shlex.join(argv), "date_utc": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M:%S"), "fp8emu": __version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {_cpu_name()}, {os.cpu_count()} logical cores",
            "workers": workers, "wall_s_this_invocation": round(wall_s, 1)}
    # the cpu stack's per-tensor TE GEMMs take the path torch takes on *this* CPU (AMX flags, mkldnn):
    # another machine may take the other one and train to other bits, so the study records which
    mkldnn = bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    prov["cpu_scaled_mm"] = "; ".join(
        f"{a} x {b} per-tensor: {cpu_path(a, b, tensorwise=True, mkldnn=mkldnn)}"
        for a, b in (("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn"))) + "; row-wise: torch-cpu-emulated"
    prov.update(c.provenance())
    prov.update({f"model.{k}": v for k, v in dataclasses.asdict(cfg.model).items()})
    prov.update({f"train.{k}": v for k, v in dataclasses.asdict(cfg.train).items()})
    prov["n_params"] = cfg.model.n_params
    # what the final validation loss averaged over: the preset's count in whole batches, at most the split's (the
    # report said train.final_windows, 8, of --batch 16's 16 windows)
    prov["final_windows_evaluated"] = evaluated_windows(cfg.train.final_windows, cfg.model.batch,
                                                        c.val_windows(cfg.model.seq_len))
    return prov


def _timing_note(prov, results):
    """Seeds and diagnostics of the runs the report holds, so that its timing columns can be read.

    Counted from the runs, not the options: ``--report-only --seeds 5`` of a two-seed study said "5 per
    recipe x stack, 5 per baseline" beside tables of two seeds (and a grown study holds runs of earlier
    invocations)."""
    def seeds(baseline):
        n = sorted(set(Counter((r["spec"]["recipe"], r["spec"]["stack"]) for r in results
                               if (r["spec"]["stack"] is None) == baseline).values()))
        return "0" if not n else str(n[0]) if len(n) == 1 else f"{n[0]} to {n[-1]}"

    prov["seeds"] = f"{seeds(False)} per recipe x stack, {seeds(True)} per baseline"
    prov["diagnostics"] = ("first seed of each recipe x stack"
                           if any(r["spec"].get("diagnostics") for r in results) else "none")
    return prov


def _inference(out: Path, results, cfg, args):
    first = next((r for r in results if r["spec"]["recipe"] == "bf16" and r.get("weights_sha256")), None)
    if first is None or args.no_inference:
        return None
    path = out / "models" / f"{first['run_id']}.pt"
    data = readers.read_bytes(path, kind="model file", max_bytes=1 << 34) if path.exists() else b""
    if hashlib.sha256(data).hexdigest() != first["weights_sha256"]:
        raise ValueError(f"{path} is missing or was modified (its SHA-256 is not the one its run recorded); "
                         f"delete {out / 'runs' / (first['run_id'] + '.json')} to retrain it")
    rows = infer.perplexity_table(data, cfg.model, cfg.corpus, n_windows=infer_windows(args))
    report.write_csv(out / "inference.csv", rows)
    return rows


def run(args) -> int:
    """Plan (checking every input), run what is missing, write the tables and the report."""
    if _MISSING is not None:
        raise ValueError(f"train-study needs torch (the torch extra: pip install 'fp8emu[torch]'): {_MISSING}")
    t0 = time.perf_counter()
    argv = _argv(args)
    cfg = study_config(args)
    specs = runs.plan_runs(cfg)
    if args.list:
        # the listing trains and writes nothing: these options were ignored, silently
        given = [o for o, v in (("--out", args.out), ("--workers", args.workers), ("--scheduler", args.scheduler),
                                ("--report-only", args.report_only), ("--quiet", args.quiet)) if v not in (None, False)]
        if given:
            raise ValueError(f"--list only prints the runs (nothing trains or is written): {', '.join(given)} would "
                             "be ignored; leave it out")
        for s in specs:
            print(s.run_id + ("  (diagnostics)" if s.diagnostics else "") + ("  (weights kept)" if s.keep_weights
                                                                             else ""))
        print(f"{len(specs)} runs")
        return 0
    if cfg.train.fork_at and "bf16" not in cfg.baselines and not args.no_report:
        # the fork report is every run's gap to the bf16 fork at its seed: without it the report failed
        # after every run had trained
        raise ValueError("--forks reports every run's gap to the bf16 fork: --baselines must include bf16 "
                         f"(got {','.join(cfg.baselines) or 'none'}), or give --no-report")
    unpaired = sorted(set(cfg.seeds) - set(cfg.baseline_seeds or cfg.seeds)) if specs else []
    if cfg.train.fork_at and unpaired and not args.no_report:
        # the fork report's gap is paired by seed while its seeds and loss columns count every seed: with
        # fewer baseline seeds its rows contradicted themselves (loss - bf16 loss != gap)
        raise ValueError(f"--forks pairs every run with the bf16 fork at its seed: --baseline-seeds "
                         f"{len(cfg.baseline_seeds)} leaves seed(s) {', '.join(map(str, unpaired))} of --seeds "
                         f"{len(cfg.seeds)} without one; give --baseline-seeds {len(cfg.seeds)} or more")
    if args.report_only and (args.workers or args.scheduler):
        # ignored, and provenance.csv then said "workers 3" of a report that no worker made
        raise ValueError(f"--report-only trains nothing: {'--workers' if args.workers else '--scheduler'} would be "
                         "ignored; leave it out")
    if args.infer_windows is not None and (args.no_inference or args.no_report):
        # the inference table is not made: the option was ignored, silently
        raise ValueError(f"--infer-windows sizes the inference table, which "
                         f"{'--no-inference' if args.no_inference else '--no-report'} leaves out: it would be "
                         "ignored; leave it out")
    if args.infer_windows is not None:
        # the table evaluates whole batches of distinct windows of the validation split: another count was cut or
        # rounded to that, silently, while provenance.csv said the count asked for
        corpus = load_corpus(cfg.corpus, min_split_bytes=cfg.model.seq_len + 1)
        val, most = corpus.val, corpus.val_windows(cfg.model.seq_len)
        b = cfg.model.batch
        if evaluated_windows(args.infer_windows, b, most) != args.infer_windows:
            raise ValueError(f"--infer-windows {args.infer_windows}: the table evaluates whole batches of --batch {b} "
                             f"windows, and the corpus's validation split ({val.size} bytes) holds {most} windows of "
                             f"--seq-len {cfg.model.seq_len} (+1) bytes; give a multiple of {b}, at most "
                             f"{evaluated_windows(most, b, most)}")
    if not specs and not args.report_only:   # before anything is written into --out
        raise ValueError("the selection has no runs (no recipe x stack pair and no baseline); choose "
                         "--recipes/--stacks, --pairs or --baselines")
    out = Path(args.out or (DEFAULT_OUT + ("-forks" if cfg.train.fork_at else "") + ("-quick" if args.quick else "")))
    # what the study writes in --out, checked before any run (a folder at report.md was "[Errno 21] Is a
    # directory" after every run had trained)
    check_out(out, [(name, "." not in name) for name in (
        "runs", "models", "figures", "study.json", "runs.csv", "curves.csv", "gaps.csv", "diagnostics.csv",
        "inference.csv", "fork_gaps.csv", "provenance.csv", "report.md", "report.html")],
        (("runs", ".json"), ("models", ".pt"), ("figures", ".png")))
    workers, scheduler = args.workers, args.scheduler
    if args.report_only:
        if not (out / "study.json").exists():
            raise ValueError(f"--report-only: {out} holds no study (no study.json)")
        runs.check_study_file(out, cfg)
        res = {"done": runs.all_results(out, cfg), "computed": 0, "skipped": 0}
        if not res["done"]:
            raise ValueError(f"--report-only: {out} holds no finished runs")
        if "bf16" in cfg.baselines and not any(r["spec"]["recipe"] == "bf16" for r in res["done"]):
            # the report's gaps are to bf16: it was "paired_gaps: the runs have no bf16 baseline" (a function's
            # name, no file, no way out)
            raise ValueError(f"--report-only: {out / 'runs'} holds no finished bf16 run (bf16-s<seed>.json), which "
                             "the report's gaps are to; rerun without --report-only to train it")
    else:
        with dask_client(workers=workers, scheduler=scheduler) as client:
            res = runs.execute(out, cfg, specs, client=client, progress=not args.quiet)
    if not args.no_report:
        rows = _inference(out, res["done"], cfg, args)
        prov = _timing_note(provenance(cfg, argv, time.perf_counter() - t0, workers or scheduler or 1), res["done"])
        if rows:     # the windows the table averaged over (the preset's count is rounded to whole batches too)
            prov["infer_windows"] = evaluated_windows(infer_windows(args), cfg.model.batch,
                                                      load_corpus(cfg.corpus).val_windows(cfg.model.seq_len))
        runs_ = report.run_rows(res["done"])
        sections = []
        if cfg.train.fork_at:
            sections = forks.report_sections(runs_, list(report.curve_rows(res["done"])))
            report.write_csv(out / "fork_gaps.csv", forks.fork_gap_rows(runs_))
        report.write_report(res["done"], out, prov, rows, sections)
    else:
        report.write_tables(res["done"], out)
    if not args.quiet:
        print(f"{res['computed']} runs trained, {res['skipped']} already in {out / 'runs'}; "
              f"{time.perf_counter() - t0:.1f} s")
        for g in report.gap_rows(res["done"]):
            gap = "" if g["gap_to_bf16"] != g["gap_to_bf16"] else f"  gap to bf16 {g['gap_to_bf16']:+.4f}"
            div = f"  ({g['diverged']} of {g['seeds']} seeds diverged)" if g["diverged"] else ""
            print(f"  {g['label']:32s} final val loss {g['mean_final_val_loss']:.4f}{gap}{div}")
        print(f"tables: {out}/runs.csv curves.csv gaps.csv diagnostics.csv"
              + ("" if args.no_report else f"\nreport: {out / 'report.md'}  {out / 'report.html'}"))
        sys.stdout.flush()
    return 0
