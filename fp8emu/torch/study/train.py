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

Examples
--------
>>> spec = RunSpec("fp32", None, 0, ModelConfig(n_layer=1, d_model=128, n_head=4, seq_len=16, batch=2),
...                TrainConfig(steps=3, eval_every=3, eval_windows=2, final_windows=2))
>>> r = train_run(spec)
>>> r["eval_steps"], len(r["train_loss"]), r["diverged"]
([0, 3], 3, False)
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import time

import numpy as np
import torch

import fp8emu.torch as fp8torch

from ... import parallel

from .corpus import eval_windows, load_corpus, sample_batch
from .model import GPT, ModelConfig, check_config

__all__ = ["RunSpec", "TrainConfig", "train_run", "BASELINES", "evaluate", "precision_context"]

#: The two high-precision baselines (run on no GPU stack).
BASELINES = ("fp32", "bf16")


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

    def check(self) -> "TrainConfig":
        for name in ("steps", "eval_every", "eval_windows", "final_windows", "threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be a non-negative integer, got {self.warmup!r}")
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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        d = dict(d)
        return cls(model=ModelConfig(**d.pop("model")), train=TrainConfig(**d.pop("train")), **d)


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


def _setup(spec):
    check_config(spec.model)
    spec.train.check()
    corpus = load_corpus(spec.corpus, min_split_bytes=spec.model.seq_len + 1)
    torch.manual_seed(spec.seed)
    model = GPT(spec.model, seed=spec.seed)
    swapped, skipped = [], {}
    if spec.recipe not in BASELINES:
        report = fp8torch.emulate(model, recipe=spec.recipe, gpu=spec.stack, diagnostics=spec.diagnostics,
                                  seed=spec.seed)
        swapped, skipped = sorted(report.swapped), {str(k): str(v) for k, v in report.skipped.items()}
    return corpus, model, swapped, skipped


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
    corpus, model, swapped, skipped = _setup(spec)
    tc, mc = spec.train, spec.model
    opt = _optimizer(model, tc)
    rng = np.random.default_rng(spec.seed)
    ev = lambda n: evaluate(model, spec.recipe, corpus.val, n, mc.seq_len, mc.batch)  # noqa: E731
    eval_steps, val_loss, train_loss, diag_rows = [0], [ev(tc.eval_windows)], [], []
    diverged = not math.isfinite(val_loss[0])
    t_train = time.perf_counter()
    for step in range(tc.steps):
        x, y = sample_batch(corpus.train, rng, mc.batch, mc.seq_len)
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, tc)
        with precision_context(spec.recipe):
            loss = model.loss(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
        opt.step()
        train_loss.append(float(loss.detach()))
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
    tail = train_loss[-min(10, len(train_loss)):]
    result = {
        "run_id": spec.run_id, "eval_steps": eval_steps, "val_loss": val_loss, "train_loss": train_loss,
        "final_val_loss": final, "final_train_loss": float(np.mean(tail)) if tail else float("nan"),
        "diverged": bool(diverged or not math.isfinite(final)), "swapped": swapped, "skipped": skipped,
        "diagnostics": _diag_bins(diag_rows, np.asarray(eval_steps[1:] or [0])),
        "wall_s": time.perf_counter() - t0, "train_s": train_s,
        "s_per_step": train_s / max(1, len(train_loss)), "threads": tc.threads,
        "n_params": mc.n_params, "torch": torch.__version__,
    }
    if spec.keep_weights:
        buf = io.BytesIO()
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()
                    if not k.endswith(("_extra_state",))}, buf)
        result["weights"] = buf.getvalue()
    return result
