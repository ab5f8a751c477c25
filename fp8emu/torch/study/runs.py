"""The study's runs: the matrix, one hashed result file per run, resume, and Dask execution.

A study lives in an output folder:

* ``study.json``: the configuration (shapes, schedule, corpus and its hash);
  a rerun into the same folder must have the same one (else ValueError);
* ``runs/RUN_ID.json``: one file per finished run, written atomically
  (a temporary file, then ``os.replace``) by the process that drives the
  study, holding the run's spec, its result and the SHA-256 of both
  (canonical JSON).  On a rerun a file whose hash does not match, whose spec is
  not the planned one or that cannot be read is refused with one error line (it
  is not merged); the runs with a valid file are skipped, the others run.  A run
  is written once, when it finishes, so an interruption loses only the runs in
  flight and never duplicates one;
* ``models/RUN_ID.pt``: the trained weights of the baselines' first seed,
  for :mod:`fp8emu.torch.study.infer`.

With a Dask client each run is one task (``client.submit``); the driver writes
the files as results arrive.

Examples
--------
>>> payload = {"spec": {"recipe": "fp32"}, "result": {"final_val_loss": 1.5}}
>>> len(digest(payload))
64
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import torch
from torch import nn

import fp8emu.torch as fp8torch

from ... import readers
from ...training import get_recipe, get_stack
from ..swap import check_combination, required_multiple
from ...lab.store import atomic_write, digest, json_restore, json_safe, make_out
from .corpus import load_corpus
from .model import ModelConfig, check_config
from .train import BASELINES, RunSpec, TrainConfig, train_dict, train_run

__all__ = ["recipe_names", "stack_names", "StudyConfig", "plan_runs", "valid_pairs", "digest", "write_result", "read_result",
           "load_results", "check_study_file", "execute", "all_results", "QUICK", "STUDY", "FORKS", "QUICK_FORKS"]


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """What every run of a study shares, and the matrix it covers."""

    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    recipes: tuple = ()
    stacks: tuple = ()
    seeds: tuple = (0, 1, 2)
    baselines: tuple = BASELINES
    corpus: str | None = None
    diagnostics: bool = True
    #: (recipe, stack) pairs to run instead of the valid pairs of recipes x stacks.
    pairs: tuple = ()
    #: The baselines' seeds (empty: ``seeds``).
    baseline_seeds: tuple = ()

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["train"] = train_dict(self.train)
        for k in ("recipes", "stacks", "seeds", "baselines", "baseline_seeds"):
            d[k] = list(d[k])
        d["pairs"] = [f"{r}@{s}" for r, s in self.pairs]
        return d


#: ``fp8emu train-study``'s defaults: the committed study (``docs/data/lm-study/provenance.csv``, run as
#: ``docs/guides/lm-study.md`` says): 2 layers, d_model 128, 4 heads, 32-byte windows, batch 4, 120 steps
#: with 12 warm-up steps, validation every 20 steps on 16 windows and at the end on 64; three seeds per
#: recipe x stack pair, five per baseline; the inference table on 64 windows.
STUDY = dict(model=ModelConfig(n_layer=2, d_model=128, n_head=4, seq_len=32, batch=4),
             train=TrainConfig(steps=120, warmup=12, eval_every=20, eval_windows=16, final_windows=64),
             seeds=(0, 1, 2), baseline_seeds=(0, 1, 2, 3, 4), infer_windows=64)

#: ``--quick``: a one-layer model, 32-byte windows, 24 steps, two seeds, TE delayed scaling on Hopper
#: and NVFP4 on Blackwell.
QUICK = dict(model=ModelConfig(n_layer=1, d_model=128, n_head=4, seq_len=32, batch=4),
             train=TrainConfig(steps=24, warmup=4, eval_every=6, eval_windows=4, final_windows=8),
             pairs=(("te-delayed", "h100"), ("te-nvfp4", "b200")), seeds=(0, 1), baseline_seeds=(0, 1),
             infer_windows=32)


#: ``fp8emu train-study --forks``: the committed fork study (``docs/data/lm-forks``): the model and schedule of
#: :data:`STUDY`, every run forked from the float32 checkpoint at step 112 for the last 8 steps, its own
#: forward evaluated on 8 windows at the fork and at the end and on 32 at the end; three seeds of every pair and
#: baseline; no diagnostics (they cost several times a step). Sized to the shared 2-core machine's time.
FORKS = dict(STUDY, train=dataclasses.replace(STUDY["train"], eval_every=8, eval_windows=8, final_windows=32,
                                              fork_at=112), baseline_seeds=(0, 1, 2), diagnostics=False)

#: ``--quick --forks``: :data:`QUICK` forked at step 16 for its last 8 steps.
QUICK_FORKS = dict(QUICK, train=dataclasses.replace(QUICK["train"], eval_every=8, fork_at=16), diagnostics=False)


def _api(name):
    """A function of fp8emu.torch, or a ValueError saying the emulation layer is not there."""
    fn = getattr(fp8torch, name, None)
    if fn is None:
        raise ValueError(f"fp8emu.torch.{name} is not available in this installation, so only the fp32/bf16 "
                         "baselines can run (use --recipes none)")
    return fn


def recipe_names() -> list:
    """The recipes of :func:`fp8emu.training.recipe_names`."""
    return list(_api("recipe_names")())


def stack_names() -> list:
    """The GPU stacks of :func:`fp8emu.training.stack_names`."""
    return list(_api("stack_names")())


def _probe_model():
    return nn.Sequential(nn.Linear(128, 128))


def valid_pairs(recipes, stacks) -> tuple:
    """(pairs fp8emu.torch accepts, {pair: reason} it refuses), each pair tried on a 128x128 layer.

    A recipe or stack name fp8emu.torch does not know is a ValueError naming the accepted ones.
    """
    known_r, known_s = recipe_names(), stack_names()
    for what, names, known in (("recipe", recipes, known_r), ("stack", stacks, known_s)):
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"unknown {what} {bad[0]!r}; the {what}s are: {', '.join(known)}")
    ok, refused = [], {}
    for r in recipes:
        for s in stacks:
            try:
                _api("emulate")(_probe_model(), recipe=r, gpu=s)
            except (ValueError, NotImplementedError) as exc:
                refused[(r, s)] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            else:
                ok.append((r, s))
    return ok, refused


def plan_runs(cfg: StudyConfig) -> list:
    """Every RunSpec of the study (baselines first), every input checked; nothing runs.

    The recipes' first seed records diagnostics (``cfg.diagnostics``); the
    baselines' first seed keeps its weights for inference.
    """
    check_config(cfg.model)
    cfg.train.check()
    corpus = load_corpus(cfg.corpus, min_split_bytes=cfg.model.seq_len + 1)
    windows = corpus.val_windows(cfg.model.seq_len)
    if windows < cfg.model.batch:
        # every evaluation takes whole batches of distinct windows: none fitted, and the first evaluation of the
        # first run was Python's bare "float division by zero"
        raise ValueError(f"corpus {corpus.name!r}: its validation split ({corpus.val.size} bytes) holds {windows} "
                         f"window(s) of seq_len {cfg.model.seq_len} (+1) bytes, fewer than the batch "
                         f"({cfg.model.batch}) each evaluation takes whole; give a larger corpus, or a smaller "
                         "--batch or --seq-len")
    if not cfg.seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in cfg.seeds):
        raise ValueError(f"seeds must be non-negative integers, got {list(cfg.seeds)}")
    bad = [b for b in cfg.baselines if b not in BASELINES]
    if bad:
        raise ValueError(f"unknown baseline {bad[0]!r}; the baselines are: {', '.join(BASELINES)}")
    if cfg.pairs:
        pairs = list(dict.fromkeys(cfg.pairs))
        for r, st in pairs:
            _, refused = valid_pairs([r], [st])
            if refused:
                raise ValueError(f"{r}@{st} cannot run: {refused[(r, st)]}")
    else:
        pairs, _ = valid_pairs(cfg.recipes, cfg.stacks) if cfg.recipes else ([], {})
        # a recipe or stack named twice made each of its runs twice (listed twice, trained twice), as --pairs's
        # duplicates already were not
        pairs = list(dict.fromkeys(pairs))
    if cfg.recipes and not cfg.pairs and not pairs:
        raise ValueError(f"no valid recipe x stack pair among recipes {list(cfg.recipes)} "
                         f"and stacks {list(cfg.stacks)}")
    tokens = cfg.model.batch * cfg.model.seq_len
    for r, st in pairs:
        # a training step's GEMMs take batch x seq_len tokens; a count the recipe cannot take failed inside
        # that pair's run, after the runs before it had trained
        mult = required_multiple(check_combination(get_recipe(r), get_stack(st)), get_stack(st))
        if tokens % mult:
            raise ValueError(f"{r}@{st} needs a multiple of {mult} tokens per step, got batch {cfg.model.batch} x "
                             f"seq_len {cfg.model.seq_len} = {tokens}; change --batch or --seq-len")
        if cfg.model.d_model % mult:
            # every projection has d_model in or out features: emulate left them all in high precision (one
            # warning), and the run, named after the recipe, trained in float32
            raise ValueError(f"{r}@{st} emulates layers whose in and out features are multiples of {mult}, and "
                             f"every projection of the model has d_model = {cfg.model.d_model} features in or out: "
                             "none would be emulated (a float32 run under the recipe's name); change --d-model")
    common = dict(model=cfg.model, train=cfg.train, corpus=cfg.corpus)
    base_seeds = cfg.baseline_seeds or cfg.seeds
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in base_seeds):
        raise ValueError(f"baseline_seeds must be non-negative integers, got {list(base_seeds)}")
    seeds, base_seeds = tuple(dict.fromkeys(cfg.seeds)), tuple(dict.fromkeys(base_seeds))
    specs = [RunSpec(b, None, s, keep_weights=(i == 0), **common)
             for b in dict.fromkeys(cfg.baselines) for i, s in enumerate(base_seeds)]
    specs += [RunSpec(r, st, s, diagnostics=cfg.diagnostics and i == 0, **common)
              for r, st in pairs for i, s in enumerate(seeds)]
    return specs


def write_result(out, spec: RunSpec, result: dict) -> Path:
    """Write ``runs/RUN_ID.json`` (and ``models/RUN_ID.pt`` when the result carries weights) atomically."""
    out = Path(out)
    result = dict(result)
    weights = result.pop("weights", None)
    if weights is not None:
        atomic_write(out / "models" / f"{spec.run_id}.pt", weights)
        result["weights_sha256"] = hashlib.sha256(weights).hexdigest()
    payload = {"spec": spec.as_dict(), "result": result}
    payload = json_safe(payload)
    payload["sha256"] = digest({"spec": payload["spec"], "result": payload["result"]})
    path = out / "runs" / f"{spec.run_id}.json"
    atomic_write(path, json.dumps(payload, sort_keys=True, indent=1).encode("utf-8"))
    return path


def read_result(path, expected: RunSpec | None = None) -> dict:
    """The result in ``path``, after checking its hash (and its spec against ``expected``).

    A file that cannot be parsed, whose hash does not match its contents, or
    whose spec is not ``expected`` is a ValueError naming the file.
    """
    path = Path(path)
    try:
        payload = readers.read_json(path)
        spec_d, result, stored = payload["spec"], payload["result"], payload["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"result file {path} is unreadable ({type(exc).__name__}); delete it to rerun its run") \
            from None
    if digest({"spec": spec_d, "result": result}) != stored:
        raise ValueError(f"result file {path} was modified (its SHA-256 does not match its contents); "
                         "it is refused, not merged: delete it to rerun its run")
    if expected is not None and spec_d != json_safe(expected.as_dict()):
        raise ValueError(f"result file {path} belongs to a different study configuration; "
                         "use another --out or delete the folder")
    return {"spec": spec_d, **json_restore(result)}


def check_study_file(out: Path, cfg: StudyConfig):
    """``study.json`` must match ``cfg`` (written when the folder is new)."""
    path = out / "study.json"
    mine = json_safe(cfg.as_dict())
    mine["corpus_sha256"] = load_corpus(cfg.corpus).sha256
    if path.exists():
        try:
            theirs = readers.read_json(path)
        except ValueError as exc:   # read_json's line names the file and the fault (not a file, bad JSON, a key twice)
            raise ValueError(f"{exc}; use another --out or delete the folder") from None
        if not isinstance(theirs, dict):
            raise ValueError(f"{path} holds a JSON {type(theirs).__name__}, not a study's settings; use another "
                             "--out or delete the folder")
        keep = ("model", "train", "corpus", "corpus_sha256")
        if not all(isinstance(theirs.get(k), dict) for k in ("model", "train")):
            # a grad-study's folder (its study.json holds "config") was "a study with another model, schedule or
            # corpus; ... delete the folder": false, and advice to delete another tool's results
            raise ValueError(f"{path} is not a train-study's (it has no model and schedule: a grad-study's or "
                             "another tool's folder?); use another --out")
        if {k: theirs.get(k) for k in keep} != {k: mine.get(k) for k in keep}:
            raise ValueError(f"{out} holds a study with another model, schedule or corpus; "
                             "use another --out or delete the folder")
    else:
        atomic_write(path, json.dumps(mine, sort_keys=True, indent=1).encode("utf-8"))


def load_results(out, specs) -> tuple:
    """(results of the finished runs, specs still to run); a bad file is a ValueError (see :func:`read_result`)."""
    out = Path(out)
    done, todo = [], []
    for spec in specs:
        path = out / "runs" / f"{spec.run_id}.json"
        if path.exists():
            done.append(read_result(path, spec))
        else:
            todo.append(spec)
    return done, todo


class _Progress:
    def __init__(self, total, enabled):
        self.bar = None
        if enabled and total:
            try:
                from tqdm.auto import tqdm
            except ImportError:   # pragma: no cover - tqdm is a dependency of the extras
                return
            self.bar = tqdm(total=total, unit="run", desc="fp8emu train-study", file=sys.stderr)

    def update(self, text):
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _run_task(spec_dict):
    """A Dask task: one run from its spec's dict (picklable everywhere)."""
    return train_run(RunSpec.from_dict(spec_dict))


def execute(out, cfg: StudyConfig, specs, *, client=None, progress=True) -> dict:
    """Run the specs without a valid result file in ``out``; returns {"done": [...], "computed": n}.

    Every file is checked before the first run starts.
    """
    out = make_out(Path(out))
    check_study_file(out, cfg)
    done, todo = load_results(out, specs)
    all_results(out, cfg)       # every run file the report will read, checked before any run trains
    bar = _Progress(len(todo), progress)
    results = list(done)

    def finish(spec, res):
        write_result(out, spec, res)
        results.append(read_result(out / "runs" / f"{spec.run_id}.json", spec))
        bar.update(f"{spec.run_id} {res['final_val_loss']:.4f}")

    try:
        if client is None:
            for spec in todo:
                finish(spec, train_run(spec))
        else:
            from distributed import as_completed
            futures = {client.submit(_run_task, s.as_dict(), key=f"train-study-{s.run_id}-{id(s)}",
                                     pure=False): s for s in todo}
            for fut in as_completed(futures):
                finish(futures[fut], fut.result())
    finally:
        bar.close()
    return {"done": all_results(out, cfg), "computed": len(todo), "skipped": len(done)}


def all_results(out, cfg: StudyConfig) -> list:
    """Every run file in ``out/runs`` (hash-checked), baselines first, then recipes in
    :func:`recipe_names` order, stacks in :func:`stack_names` order, seeds ascending.

    Runs of earlier invocations with other recipes, stacks or seeds (same model, schedule and
    corpus, which ``study.json`` guarantees) are included: a study can be grown run by run.
    """
    res = []
    for path in sorted((Path(out) / "runs").glob("*.json")):
        r = read_result(path)
        s = r["spec"]
        # a run is its file's name: a copy ("bf16-s0 copy.json") or a renamed file was read as one more run,
        # its rows twice in runs.csv and curves.csv
        try:
            rid = RunSpec(**{k: s[k] for k in ("recipe", "stack", "seed")}).run_id
        except (KeyError, TypeError):
            rid = None
        if rid is None or path.stem != rid or r.get("run_id") != rid:
            raise ValueError(f"result file {path} holds run {rid or '(no run)'!r}, whose file is "
                             f"runs/{rid}.json (a copy or a renamed file?); delete it or give it its run's name")
        if [s["model"], s["train"], s["corpus"]] != json_safe([cfg.as_dict()["model"], cfg.as_dict()["train"],
                                                           cfg.corpus]):
            raise ValueError(f"result file {path} belongs to a different study configuration; "
                             "use another --out or delete the folder")
        res.append(r)
    rn = {n: i for i, n in enumerate(BASELINES)}
    try:
        rn.update({n: i + 10 for i, n in enumerate(recipe_names())})
        sn = {n: i for i, n in enumerate(stack_names())}
    except ValueError:
        sn = {}
    res.sort(key=lambda r: (rn.get(r["spec"]["recipe"], 999), r["spec"]["recipe"],
                            sn.get(r["spec"]["stack"], -1 if r["spec"]["stack"] is None else 999),
                            str(r["spec"]["stack"]), r["spec"]["seed"]))
    return res
