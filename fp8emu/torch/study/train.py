"""One training run of the study: the GPT on the corpus, in fp32, bf16 or an emulated FP8/FP4 recipe.

* **Optimizer**: AdamW (betas 0.9/0.95, weight decay on the matrices only),
  linear warm-up then cosine decay to a tenth of the peak rate, gradients
  clipped to norm 1.  Master weights and optimizer state are float32 in
  every run.
* **Precisions**: ``"fp32"``: everything float32.  ``"bf16"``: the forward
  under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (the projections
  run with bf16 operands and outputs, as mixed-precision training does on a
  GPU); the residual stream, LayerNorms, softmax and loss stay float32.  A
  recipe name: the projections swapped by :func:`fp8emu.torch.emulate` with
  that recipe on that GPU stack, everything else float32.
* **Determinism**: the weights come from ``seed``, the training batches from
  ``numpy.random.default_rng(seed)`` (the same batches for every precision
  at a seed, so gaps are paired), validation uses fixed windows; torch runs
  and fp8emu's GEMMs (:func:`fp8emu.parallel.set_threads`) run on ``threads`` threads (1 by default).  The same spec gives the same
  losses bit for bit.
* **Forks** (``TrainConfig.fork_at`` = S > 0): every run starts from one shared
  checkpoint instead of its own initial weights: a float32 run of seed
  :data:`TRUNK_SEED` (the fp32 baseline's run at that seed, step for step) to step
  S, its weights and AdamW state.  From there the run trains the remaining
  ``steps - S`` steps in its precision, on batches from
  ``numpy.random.default_rng((seed, S))`` (the same for every precision at a seed),
  the learning-rate schedule continuing where the checkpoint left it.  Contrasts
  between forks then hold only what the F steps under each precision did.
* **Evaluation in float32**: besides the validation loss through the run's own
  forward (``final_val_loss``, quantized as the recipe trains), every run reports
  its trained weights evaluated in float32 by a plain :class:`GPT`: over the whole
  validation split (``fp32_val_loss``, :func:`evaluate_fp32`) and over the same
  final windows (``fp32_window_loss``), so that what training did and what
  quantized inference does separate.

Examples
--------
>>> spec = RunSpec("fp32", None, 0, ModelConfig(n_layer=1, d_model=128, n_head=4, seq_len=16, batch=2),
...                TrainConfig(steps=3, eval_every=3, eval_windows=2, final_windows=2))
>>> r = train_run(spec)
>>> r["eval_steps"], len(r["train_loss"]), r["diverged"], r["fp32_val_loss"] > 0
([0, 3], 3, False, True)
>>> fork = train_run(dataclasses.replace(spec, train=dataclasses.replace(spec.train, steps=4, fork_at=2)))
>>> fork["eval_steps"], len(fork["train_loss"]), len(fork["trunk_sha256"])
([2, 3, 4], 2, 64)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import io
import math
import time

import numpy as np
import torch

import fp8emu.torch as fp8torch

from ... import parallel

from .corpus import eval_windows, load_corpus, sample_batch, split_windows
from .model import GPT, ModelConfig, check_config

__all__ = ["RunSpec", "TrainConfig", "train_run", "BASELINES", "evaluate", "evaluate_fp32", "precision_context",
           "evaluated_windows",
           "trunk", "TRUNK_SEED", "train_dict", "plain_copy"]

#: The two high-precision baselines (run on no GPU stack).
BASELINES = ("fp32", "bf16")
#: The seed of the float32 run whose step ``fork_at`` every fork starts from.
TRUNK_SEED = 0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimizer schedule and evaluation."""

    steps: int = 300
    lr: float = 2e-3
    warmup: int = 30
    weight_decay: float = 0.1
    clip: float = 1.0
    eval_every: int = 25
    eval_windows: int = 16
    final_windows: int = 64
    threads: int = 1
    #: 0: every run trains from its own initial weights; S > 0: from the float32 checkpoint at step S.
    fork_at: int = 0

    def check(self) -> "TrainConfig":
        for name in ("steps", "eval_every", "eval_windows", "final_windows", "threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be a non-negative integer, got {self.warmup!r}")
        if isinstance(self.fork_at, bool) or not isinstance(self.fork_at, int) or not 0 <= self.fork_at < self.steps:
            raise ValueError(f"fork_at must be an integer from 0 (no fork) to steps - 1 = {self.steps - 1} "
                             f"(a fork trains at least one step), got {self.fork_at!r}")
        for name in ("lr", "clip"):
            v = getattr(self, name)
            # checked as the float32 the optimizer and the clip multiply float32 parameters and gradients by:
            # 1e40 would be Inf there, 1e-50 zero
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)
                    and 2.0 ** -149 <= v <= float(np.finfo(np.float32).max)):
                raise ValueError(f"{name} must be a positive number that float32 holds (about 1.4e-45 to "
                                 f"3.4e38), got {v!r}")
        if not (isinstance(self.weight_decay, (int, float)) and 0 <= self.weight_decay < 1):
            raise ValueError(f"weight_decay must be in [0, 1), got {self.weight_decay!r}")
        return self


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: precision (``"fp32"``, ``"bf16"`` or a recipe of :func:`fp8emu.training.recipe_names`),
    GPU stack (None for the baselines), seed, shapes, schedule, corpus path (None: pydoc_data),
    whether to record :func:`fp8emu.torch.diagnostics` and whether to return the trained weights."""

    recipe: str
    stack: str | None
    seed: int
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    corpus: str | None = None
    diagnostics: bool = False
    keep_weights: bool = False

    @property
    def run_id(self) -> str:
        where = self.recipe if self.stack is None else f"{self.recipe}@{self.stack}"
        return f"{where}-s{self.seed}"

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["train"] = train_dict(self.train)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        d = dict(d)
        return cls(model=ModelConfig(**d.pop("model")), train=TrainConfig(**d.pop("train")), **d)


def train_dict(tc: TrainConfig) -> dict:
    """``tc`` as a dict, ``fork_at`` left out when 0 (so a study from scratch keeps the files and hashes
    it had before forks existed)."""
    d = dataclasses.asdict(tc)
    if not d["fork_at"]:
        del d["fork_at"]
    return d


def precision_context(recipe: str):
    """``torch.autocast`` to bf16 for the bf16 baseline, else nothing."""
    if recipe == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _lr_at(step, tc: TrainConfig):
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    span = max(1, tc.steps - tc.warmup)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - tc.warmup) / span)))


def evaluated_windows(n_windows, batch, available) -> int:
    """How many windows :func:`evaluate` reads when asked for ``n_windows`` of a split holding ``available``:
    whole batches, at least one, at most the split's (what a report says it averaged over).

    Examples
    --------
    >>> evaluated_windows(64, 4, 1000), evaluated_windows(64, 5, 1000), evaluated_windows(5, 16, 1000)
    (64, 60, 16)
    >>> evaluated_windows(64, 4, 10)
    8
    """
    return max(1, min(max(batch, n_windows // batch * batch), available)) // batch * batch


@torch.no_grad()
def evaluate(model, recipe, data, n_windows, seq_len, batch) -> float:
    """Mean cross-entropy (nats/byte) over fixed windows of ``data``, in ``batch``-sized pieces."""
    # whole batches only: an emulated GEMM's token count is a multiple of what the recipe needs
    x, y = eval_windows(data, max(batch, n_windows // batch * batch), seq_len)
    x, y = x[:x.shape[0] // batch * batch], y[:y.shape[0] // batch * batch]
    total, count = 0.0, 0
    with precision_context(recipe):
        for i in range(0, x.shape[0], batch):
            xb, yb = torch.from_numpy(x[i:i + batch]), torch.from_numpy(y[i:i + batch])
            total += float(model.loss(xb, yb)) * xb.numel()
            count += xb.numel()
    return total / count


def plain_copy(model, cfg: ModelConfig) -> GPT:
    """A plain float32 :class:`GPT` holding ``model``'s weights (an emulated model's too: its extra buffers,
    the recipes' step counters and scales, are left out)."""
    plain = GPT(cfg, seed=0)
    own = plain.state_dict()
    theirs = model.state_dict()
    missing = [k for k in own if k not in theirs]
    if missing:
        raise ValueError(f"plain_copy: the model has no {missing[0]!r}; it is not a GPT of this configuration")
    plain.load_state_dict({k: theirs[k].detach().float() for k in own})
    return plain


#: Windows per forward in :func:`evaluate_fp32` (memory, not the result: each window is computed alone).
_FP32_CHUNK = 64


@torch.no_grad()
def evaluate_fp32(model, data, cfg: ModelConfig) -> float:
    """Mean cross-entropy (nats/byte) of ``model``'s weights in float32 over every byte of ``data`` after the
    first (:func:`~fp8emu.torch.study.corpus.split_windows`), no autocast, no emulation; summed in float64."""
    plain = plain_copy(model, cfg)
    x, y, counted = split_windows(data, cfg.seq_len)
    total = 0.0
    for i in range(0, x.shape[0], _FP32_CHUNK):
        logits = plain(torch.from_numpy(x[i:i + _FP32_CHUNK]))
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               torch.from_numpy(y[i:i + _FP32_CHUNK]).reshape(-1), reduction="none")
        total += float((ce.double() * torch.from_numpy(counted[i:i + _FP32_CHUNK]).reshape(-1)).sum())
    return total / float(counted.sum())


def _optimizer(model, tc):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=tc.lr, betas=(0.9, 0.95), eps=1e-8)


def _diag_bins(rows, bounds):
    """Diagnostics rows averaged per (layer, pass, evaluation interval): the heat maps' cells."""
    cells = {}
    for r in rows:
        step = int(r.get("step", 0))
        b = int(np.searchsorted(bounds, step, side="left"))
        key = (str(r["layer"]), f'{r["pass"]}.{r.get("tensor", "")}'.rstrip("."), min(b, len(bounds) - 1))
        cells.setdefault(key, []).append(r)
    out = []
    for (layer, pss, b), rs in sorted(cells.items()):
        cell = {"layer": layer, "pass": pss, "step": int(bounds[b]), "n": len(rs)}
        for f in ("frac_saturated", "frac_clipped", "frac_underflow", "frac_flushed", "gemm_rel_err"):
            vals = [float(r[f]) for r in rs if r.get(f) is not None and math.isfinite(float(r[f]))]
            cell[f] = float(np.mean(vals)) if vals else None
        amaxes = [float(r["amax"]) for r in rs if r.get("amax") is not None]
        cell["amax"] = float(np.max(amaxes)) if amaxes else None
        cell["scale"] = float(rs[-1]["scale"]) if rs[-1].get("scale") is not None else None
        out.append(cell)
    return out


def _step(model, opt, recipe, x, y, lr, clip) -> float:
    """One training step; the loss before it."""
    for g in opt.param_groups:
        g["lr"] = lr
    with precision_context(recipe):
        loss = model.loss(torch.from_numpy(x), torch.from_numpy(y))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return float(loss.detach())


def _state_sha256(state: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode("utf-8") + b"\0" + state[k].detach().contiguous().numpy().tobytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=2)
def _trunk(model_cfg: ModelConfig, tc: TrainConfig, corpus_path) -> tuple:
    corpus = load_corpus(corpus_path, min_split_bytes=model_cfg.seq_len + 1)
    torch.manual_seed(TRUNK_SEED)
    model = GPT(model_cfg, seed=TRUNK_SEED)
    opt = _optimizer(model, tc)
    rng = np.random.default_rng(TRUNK_SEED)
    for step in range(tc.fork_at):
        x, y = sample_batch(corpus.train, rng, model_cfg.batch, model_cfg.seq_len)
        _step(model, opt, "fp32", x, y, _lr_at(step, tc), tc.clip)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, copy.deepcopy(opt.state_dict()), _state_sha256(state)


def trunk(spec: "RunSpec") -> tuple:
    """(weights, AdamW state, SHA-256 of the weights) of the shared float32 checkpoint at step
    ``spec.train.fork_at`` (seed :data:`TRUNK_SEED`); cached per process, copies handed out."""
    state, opt_state, sha = _trunk(spec.model, spec.train, spec.corpus)
    return {k: v.clone() for k, v in state.items()}, copy.deepcopy(opt_state), sha


def _setup(spec):
    check_config(spec.model)
    spec.train.check()
    corpus = load_corpus(spec.corpus, min_split_bytes=spec.model.seq_len + 1)
    fork = spec.train.fork_at > 0
    if fork:
        state, opt_state, sha = trunk(spec)
    torch.manual_seed(spec.seed)
    model = GPT(spec.model, seed=TRUNK_SEED if fork else spec.seed)
    if fork:
        model.load_state_dict(state)
    names = [n for n, _ in model.named_parameters()]
    swapped, skipped = [], {}
    if spec.recipe not in BASELINES:
        report = fp8torch.emulate(model, recipe=spec.recipe, gpu=spec.stack, diagnostics=spec.diagnostics,
                                  seed=spec.seed)
        swapped, skipped = sorted(report.swapped), {str(k): str(v) for k, v in report.skipped.items()}
    # the checkpoint's AdamW state is matched to parameters by position: emulation must keep them all in order
    if [n for n, _ in model.named_parameters()] != names:
        raise RuntimeError("fp8emu.torch.emulate changed the model's parameters; the fork's optimizer state "
                           "cannot be restored")
    opt = _optimizer(model, spec.train)
    if fork:
        opt.load_state_dict(opt_state)
    return corpus, model, opt, swapped, skipped, (sha if fork else None)


def train_run(spec: RunSpec) -> dict:
    """Train one run; returns its losses, timing, swapped layers and (binned) diagnostics."""
    old_threads, old_fp8 = torch.get_num_threads(), parallel.get_threads()
    torch.set_num_threads(spec.train.threads)
    parallel.set_threads(spec.train.threads)
    try:
        return _train(spec)
    finally:
        torch.set_num_threads(old_threads)
        parallel.set_threads(old_fp8)


def _train(spec):
    t0 = time.perf_counter()
    corpus, model, opt, swapped, skipped, trunk_sha = _setup(spec)
    tc, mc = spec.train, spec.model
    start = tc.fork_at
    rng = np.random.default_rng((spec.seed, start) if start else spec.seed)
    ev = lambda n: evaluate(model, spec.recipe, corpus.val, n, mc.seq_len, mc.batch)  # noqa: E731
    eval_steps, val_loss, train_loss, diag_rows = [start], [ev(tc.eval_windows)], [], []
    diverged = not math.isfinite(val_loss[0])
    t_train = time.perf_counter()
    for step in range(start, tc.steps):
        x, y = sample_batch(corpus.train, rng, mc.batch, mc.seq_len)
        train_loss.append(_step(model, opt, spec.recipe, x, y, _lr_at(step, tc), tc.clip))
        if not math.isfinite(train_loss[-1]):
            diverged = True
            break
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            if spec.diagnostics:
                diag_rows.extend(fp8torch.diagnostics(model))
                fp8torch.reset_diagnostics(model)
            eval_steps.append(step + 1)
            val_loss.append(ev(tc.eval_windows))
    train_s = time.perf_counter() - t_train
    final = ev(tc.final_windows) if not diverged else float("nan")
    fp32_full = evaluate_fp32(model, corpus.val, mc) if not diverged else float("nan")
    fp32_windows = evaluate(plain_copy(model, mc), "fp32", corpus.val, tc.final_windows, mc.seq_len, mc.batch) \
        if not diverged else float("nan")
    tail = train_loss[-min(10, len(train_loss)):]
    result = {
        "run_id": spec.run_id, "eval_steps": eval_steps, "val_loss": val_loss, "train_loss": train_loss,
        "final_val_loss": final, "fp32_val_loss": fp32_full, "fp32_window_loss": fp32_windows,
        "final_train_loss": float(np.mean(tail)) if tail else float("nan"),
        "diverged": bool(diverged or not math.isfinite(final)), "swapped": swapped, "skipped": skipped,
        "diagnostics": _diag_bins(diag_rows, np.asarray(eval_steps[1:] or [0])),
        "wall_s": time.perf_counter() - t0, "train_s": train_s,
        "s_per_step": train_s / max(1, len(train_loss)), "threads": tc.threads,
        "n_params": mc.n_params, "torch": torch.__version__,
    }
    if trunk_sha is not None:
        result["trunk_sha256"] = trunk_sha
    if spec.keep_weights:
        buf = io.BytesIO()
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()
                    if not k.endswith(("_extra_state",))}, buf)
        result["weights"] = buf.getvalue()
    return result
