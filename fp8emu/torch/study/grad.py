"""The gradient study's cells: states of a float32 reference run and the probes run on them.

A cell is one task (picklable dict in, rows out); :mod:`fp8emu.cli.grad_study` plans them, runs them
in process or on a Dask cluster and stores one hashed file per cell.  Every cell recomputes what it
needs from the configuration (the float32 reference run up to its checkpoint is a few seconds), so
cells are independent, and runs on one thread (torch and fp8emu), so a cell gives the same bits
wherever it runs.

States (all from one float32 run of the study's byte GPT, AdamW, seed 0):

* ``probe``: a checkpoint, one fixed batch, one recipe x stack: per layer and GEMM, the layer-level
  and model-level metrics of :mod:`fp8emu.lab.grad_study` (N draws);
* ``bias``: the last checkpoint's MLP ``fc`` layer, its float32 operands, NVFP4 variants over N
  draws, plain or with outlier channels injected into its input (findings a, c);
* ``eden``: its output gradient under element-wise SR and MS-EDEN, each after a random Hadamard
  transform drawn per draw (finding f); ``operands``: weight copies of fprop / dgrad (b) and MXFP8
  scale rules (g);
* ``ksweep``: the ``fc`` layer's wgrad with K = tokens per batch, per Hopper stack (d); ``width``: a
  square layer of width 256 to 1024 on synthetic operands, fprop's and dgrad's K = the width;
* ``spike``: one linear layer, an amax spike injected at a step, delayed against current scaling (e);
* ``fork``: a short run under a recipe from a shared checkpoint, next to the float32 fork.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import warnings

import numpy as np
import torch
from torch import nn

from ... import parallel
from ...codec import decode
from ...gemm import block_scaled_mm
from ...lab.grad_metrics import compare, mean_curve, norm
from ...scaling import NVFP4Quantizer, quantize_mx, quantize_nvfp4_te
from ...scaling.hadamard import inverse_rht, rht
from ...scaling.ms_eden import ms_eden_nvfp4
from ...training import TEDelayedScaling, TENVFP4BlockScaling, get_recipe
from ..probes import capture, exact_accumulation, exact_passes, layer_passes, qat_model, emulated_model
from ..swap import HighPrecisionWarning, diagnostics, emulate
from .corpus import eval_windows, load_corpus, sample_batch
from .model import GPT, ModelConfig, check_config

__all__ = ["GradConfig", "QUICK", "FULL", "plan_cells", "run_cell", "reference_states", "cell_id"]

_EXTRA_RECIPES = {
    "te-nvfp4-no-rht-no-sr": TENVFP4BlockScaling(disable_rht=True, disable_stochastic_rounding=True,
                                                 name="te-nvfp4-no-rht-no-sr"),
}


@dataclasses.dataclass(frozen=True)
class GradConfig:
    """What every cell shares: the model, the reference run, the sizes of each kind of cell."""

    model: ModelConfig = ModelConfig(n_layer=1, d_model=128, n_head=4, seq_len=64, batch=8)
    ref_steps: int = 100
    checkpoints: tuple = (0, 50, 100)
    lr: float = 2e-3
    draws: int = 4
    bias_draws: int = 64
    outlier_channels: int = 2
    outlier_factor: float = 16.0
    pairs: tuple = ()
    fork_pairs: tuple = ()
    fork_at: int = 50
    fork_steps: int = 40
    ks: tuple = (256, 512, 1024, 2048, 4096)
    spike_width: int = 128
    spike_tokens: int = 128
    spike_at: int = 8
    spike_history: int = 16
    spike_factor: float = 1024.0
    widths: tuple = (256, 512, 1024)
    width_tokens: int = 512
    corpus: str | None = None

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("checkpoints", "ks", "widths"):
            d[k] = list(d[k])
        d["pairs"] = [f"{r}@{s}" for r, s in self.pairs]
        d["fork_pairs"] = [f"{r}@{s}" for r, s in self.fork_pairs]
        return d

    @classmethod
    def from_dict(cls, d) -> "GradConfig":
        """The configuration :meth:`as_dict` wrote (ValueError naming what does not fit)."""
        try:
            d = dict(d)
            d["model"] = ModelConfig(**d["model"])
            for k in ("checkpoints", "ks", "widths"):
                d[k] = tuple(d.get(k, ()))
            for k in ("pairs", "fork_pairs"):
                d[k] = tuple(tuple(p.split("@")) for p in d[k])
            return cls(**d)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a GradConfig dictionary (as GradConfig.as_dict writes it): "
                             f"{type(exc).__name__}: {exc}") from None

    def check(self) -> "GradConfig":
        """Every field of a type and range the cells can run with, or one ValueError naming it."""
        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig, got {type(self.model).__name__}")
        check_config(self.model)
        _int(self, "ref_steps", 0)
        for name in ("draws", "bias_draws", "fork_steps", "spike_width", "spike_tokens", "spike_history",
                     "width_tokens"):
            _int(self, name, 1)
        # steps 1 .. spike_at - 1 are the "before" the spike rule compares with (delayed scaling runs its
        # step 0 with scale 1)
        _int(self, "spike_at", 2)
        _int(self, "outlier_channels", 0, self.model.d_model)
        _int(self, "fork_at", 0, self.ref_steps)
        for name in ("lr", "outlier_factor", "spike_factor"):
            v = getattr(self, name)
            # used as float32 multipliers: 1e40 would be Inf there, 1e-50 zero
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)
                    and 2.0 ** -149 <= v <= float(np.finfo(np.float32).max)):
                raise ValueError(f"{name} must be a positive number that float32 holds (about 1.4e-45 to "
                                 f"3.4e38), got {v!r}{_numpy(v)}")
        for name, lo in (("checkpoints", 0), ("ks", 1), ("widths", 1)):
            v = getattr(self, name)
            if not isinstance(v, tuple) or any(isinstance(c, bool) or not isinstance(c, int) or c < lo for c in v) \
                    or len(set(v)) != len(v):
                raise ValueError(f"{name} must be a tuple of distinct integers >= {lo}, got {v!r}{_numpy(v)}")
        if not self.checkpoints:
            raise ValueError("checkpoints must name at least one step (the bias, eden and operands cells use the "
                             "last)")
        for name in ("pairs", "fork_pairs"):
            v = getattr(self, name)
            if not isinstance(v, tuple) or any(not (isinstance(p, tuple) and len(p) == 2 and all(
                    isinstance(q, str) for q in p)) for p in v) or len(set(v)) != len(v):
                raise ValueError(f"{name} must be a tuple of distinct (recipe, stack) name pairs, got {v!r}")
        if self.corpus is not None and not isinstance(self.corpus, str):
            raise ValueError(f"corpus must be None (the default corpus) or a file path as a str, got {self.corpus!r}")
        return self


def _int(cfg, name, lo, hi=None):
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be an integer {lo}..{hi if hi is not None else ''}, got {v!r}{_numpy(v)}")


def _numpy(v) -> str:
    """Why a NumPy number is refused, where ``v`` is or holds one ("" otherwise)."""
    # "draws must be an integer 1.., got np.int64(4)" was false of its value: it is the type (the configuration is
    # hashed as JSON, which has no NumPy numbers)
    held = v if isinstance(v, tuple) else (v,)
    return (" (a NumPy number: give Python's, int(...) or float(...); the configuration is written as JSON)"
            if any(isinstance(x, np.generic) for x in held) else "")


_QUICK_PAIRS = (("te-current", "h100"), ("te-mxfp8", "b200"), ("te-nvfp4", "b200"))
#: ``--quick``: a one-layer, 64-wide model, small sizes (24 cells, about a minute on 2 cores).
QUICK = GradConfig(model=ModelConfig(n_layer=1, d_model=64, n_head=4, seq_len=32, batch=8), ref_steps=20,
                   checkpoints=(0, 20), draws=2, bias_draws=8, pairs=_QUICK_PAIRS, fork_pairs=_QUICK_PAIRS[1:],
                   fork_at=20, fork_steps=4, ks=(256, 1024, 4096), spike_width=64, spike_tokens=64, spike_at=4,
                   spike_history=8, widths=(128, 256), width_tokens=256)
#: The committed study: a one-block 128-wide model, 11 recipe x stack pairs at 3 checkpoints, K up to 4096 (59 cells).
FULL = GradConfig(pairs=(("te-delayed", "h100"), ("te-current", "h100"), ("te-current", "h100-fast"),
                         ("te-block", "h100"), ("deepseek-v3", "h100"), ("torchao-rowwise", "h100"),
                         ("te-mxfp8", "b200"), ("te-nvfp4", "b200"), ("te-nvfp4-no-rht", "b200"),
                         ("te-nvfp4-no-sr", "b200"), ("te-nvfp4-no-2d", "b200")),
                  fork_pairs=(("te-current", "h100"), ("te-mxfp8", "b200"), ("te-nvfp4", "b200"),
                              ("te-nvfp4-no-sr", "b200")))


def cell_id(cell) -> str:
    """A file-name-safe id of a cell: its kind and parameters."""
    parts = [cell["kind"]] + [f"{k}={v}" for k, v in sorted(cell.items()) if k != "kind"]
    return "_".join(parts).replace("@", "-at-").replace("/", "-")


def plan_cells(cfg: GradConfig) -> list:
    """Every cell of the study (dicts), every input checked (:meth:`GradConfig.check`, the recipe x stack
    pairs and the layer widths against what each recipe takes, a corpus file); nothing runs."""
    cfg.check()
    bad = [c for c in cfg.checkpoints if not (isinstance(c, int) and 0 <= c <= cfg.ref_steps)]
    if bad:
        raise ValueError(f"checkpoints must be steps 0..{cfg.ref_steps} of the reference run, got {bad}")
    if not (0 <= cfg.fork_at <= cfg.ref_steps):
        raise ValueError(f"fork_at must be a step 0..{cfg.ref_steps}, got {cfg.fork_at}")
    tokens = cfg.model.batch * cfg.model.seq_len
    if tokens % 256 or any(k % (256 if k >= 256 else k) or k % cfg.model.seq_len for k in cfg.ks):
        raise ValueError(f"tokens per batch ({tokens}) and every K of the sweep ({list(cfg.ks)}) must be multiples "
                         f"of 256 and of seq_len ({cfg.model.seq_len})")
    for r, s in tuple(cfg.pairs) + tuple(cfg.fork_pairs):
        why = _refusal(r, s, cfg.model.d_model)
        if why:
            raise ValueError(f"{r}@{s} cannot run this model: {why}")
    for what, width, recipes in (("widths", cfg.widths, ("te-current",)),
                                 ("spike_width", (cfg.spike_width,), ("te-delayed", "te-current"))):
        for w_, r in ((w_, r) for w_ in width for r in recipes):
            why = _refusal(r, "h100", w_)
            if why:
                raise ValueError(f"{what}: {r} on h100 cannot run a {w_}-wide layer: {why}")
    if cfg.width_tokens % 16:
        raise ValueError(f"width_tokens ({cfg.width_tokens}) must be a multiple of 16 (the wgrad GEMM's K of the "
                         "width cells, te-current on h100)")
    if cfg.corpus is not None:
        load_corpus(cfg.corpus, min_split_bytes=cfg.model.seq_len + 1)
    cells = [{"kind": "probe", "state": c, "pair": f"{r}@{s}"} for c in cfg.checkpoints for r, s in cfg.pairs]
    cells += [{"kind": "bias", "case": case} for case in ("plain", "outliers")]
    cells += [{"kind": "eden"}, {"kind": "operands"}]
    cells += [{"kind": "ksweep", "stack": s, "K": k} for s in ("h100", "h100-fast") for k in cfg.ks]
    cells += [{"kind": "width", "stack": s, "width": w} for s in ("h100", "h100-fast") for w in cfg.widths]
    cells += [{"kind": "spike", "recipe": r} for r in ("te-delayed", "te-current")]
    cells += [{"kind": "fork", "pair": f"{r}@{s}"} for r, s in cfg.fork_pairs]
    return cells


def _refusal(recipe, stack, width):
    """Why ``recipe`` on ``stack`` leaves a ``width`` x ``width`` layer in high precision (None: it takes it)."""
    get_recipe(recipe)
    probe = nn.Sequential(nn.Linear(width, width))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HighPrecisionWarning)
        rep = emulate(probe, recipe, stack)
    return None if "0" in rep.swapped else rep.skipped.get("0")


# --------------------------------------------------------------------------- the reference run


def _opt(model, lr):
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)


def _loss_fn(x, y):
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    return lambda m: m.loss(xt, yt)


@functools.lru_cache(maxsize=2)
def _reference(key: str):
    cfg = GradConfig.from_dict(json.loads(key))
    corpus = load_corpus(cfg.corpus, min_split_bytes=cfg.model.seq_len + 1)
    model = GPT(cfg.model, seed=0)
    opt = _opt(model, cfg.lr)
    rng = np.random.default_rng(0)
    states = {}
    keep = set(cfg.checkpoints) | {cfg.fork_at}
    for step in range(cfg.ref_steps + 1):
        if step in keep:
            states[step] = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
        if step == cfg.ref_steps:
            break
        x, y = sample_batch(corpus.train, rng, cfg.model.batch, cfg.model.seq_len)
        opt.zero_grad(set_to_none=True)
        model.loss(torch.from_numpy(x), torch.from_numpy(y)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return corpus, states


def reference_states(cfg: GradConfig) -> tuple:
    """``(corpus, {step: (model state_dict, optimizer state_dict)})`` of the float32 reference run."""
    return _reference(json.dumps(cfg.as_dict(), sort_keys=True))


def _model_at(cfg, step):
    _, states = reference_states(cfg)
    m = GPT(cfg.model, seed=0)
    m.load_state_dict(states[step][0])
    return m


def _probe_batch(cfg, corpus, step, batch=None):
    rng = np.random.default_rng([1, step])
    return sample_batch(corpus.train, rng, batch or cfg.model.batch, cfg.model.seq_len)


# --------------------------------------------------------------------------- cells


def _warm(m, loss_fn, recipe):
    if get_recipe(recipe).delayed():
        for p in m.parameters():
            p.grad = None
        loss_fn(m).backward()


def _probe(cfg, cell):
    recipe, stack = cell["pair"].split("@")
    corpus, _ = reference_states(cfg)
    model = _model_at(cfg, cell["state"])
    loss_fn = _loss_fn(*_probe_batch(cfg, corpus, cell["state"]))
    _, ref = capture(model, loss_fn)
    q = qat_model(model, recipe, stack)
    _warm(q, loss_fn, recipe)
    _, qat = capture(q, loss_fn)
    em = emulated_model(model, recipe, stack, seed=0)
    _warm(em, loss_fn, recipe)
    _, rec = capture(em, loss_fn)
    rows = []
    for name, cap in ref.items():
        if name not in rec or name not in qat:
            continue
        exact = exact_passes(cap.x, cap.w, cap.b, cap.dy)
        draws = [layer_passes(cap.x, cap.w, cap.b, cap.dy, recipe, stack, seed=s) for s in range(cfg.draws)]
        ea = layer_passes(cap.x, cap.w, cap.b, cap.dy, recipe, exact_accumulation(stack), seed=0)
        for gemm, ref_v in exact.items():
            d0 = draws[0][gemm]
            m = compare(d0, ref_v)
            mref, mq, mrec = cap.passes()[gemm], qat[name].passes()[gemm], rec[name].passes()[gemm]
            nref = norm(ref_v)
            row = {"state": cell["state"], "recipe": recipe, "stack": stack, "layer": name, "gemm": gemm,
                   "draws": cfg.draws, **m,
                   "rel_err_mean": mean_curve([d[gemm] for d in draws], ref_v, [cfg.draws])[0],
                   "quant_err": compare(ea[gemm], ref_v)["rel_err"],
                   "accum_err": norm(np.asarray(d0, np.float64) - ea[gemm]) / nref if nref else
                   math.nan}
            ok = mref is not None and mrec is not None and mq is not None
            for tag, a, r in (("model_{}_fp32", mrec, mref), ("model_{}_qat", mrec, mq), ("qat_{}_fp32", mq, mref)):
                mm = compare(a, r) if ok else {"rel_err": math.nan, "cosine": math.nan, "shrink": math.nan}
                row.update({tag.format(k): v for k, v in mm.items()})
            rows.append(row)
    return {"probes": rows}


def _fc(cfg, batch=None):
    corpus, _ = reference_states(cfg)
    step = max(cfg.checkpoints)
    model = _model_at(cfg, step)
    _, caps = capture(model, _loss_fn(*_probe_batch(cfg, corpus, step, batch)))
    return caps["blocks.0.mlp.fc"]


def _ns(nmax):
    return [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= nmax]


def _bias(cfg, cell):
    cap = _fc(cfg)
    x = cap.x.copy()
    if cell["case"] == "outliers":
        x[:, :cfg.outlier_channels] *= np.float32(cfg.outlier_factor)
    exact = exact_passes(x, cap.w, cap.b, cap.dy)
    ns, rows, draws_rows = _ns(cfg.bias_draws), [], []
    for recipe in ("te-nvfp4", "te-nvfp4-no-sr", "te-nvfp4-no-rht"):
        random = not get_recipe(recipe).disable_stochastic_rounding
        outs = [layer_passes(x, cap.w, cap.b, cap.dy, recipe, "exact", seed=s)["wgrad"]
                for s in range(cfg.bias_draws if random else 2)]
        outs += [outs[-1]] * (cfg.bias_draws - len(outs))   # no SR: every draw is the same bits
        for n, e in zip(ns, mean_curve(outs, exact["wgrad"], ns)):
            rows.append({"case": cell["case"], "recipe": recipe, "level": "wgrad", "n": n, "rel_err_mean": e})
        for s, o in enumerate(outs[:max(ns) if random else 1]):
            draws_rows.append({"case": cell["case"], "recipe": recipe, "gemm": "wgrad", "draw": s,
                               "rel_err": compare(o, exact["wgrad"])["rel_err"]})
    # the output gradient alone, as the wgrad GEMM reads it (K = tokens along axis 1), without the RHT so
    # its dequantized values compare with dY itself
    g = cap.dy.T.copy()
    for recipe in ("te-nvfp4-no-rht", "te-nvfp4-no-rht-no-sr"):
        r = _EXTRA_RECIPES.get(recipe) or get_recipe(recipe)
        outs = [r.operand("grad_output", g, 1, "wgrad", rng=np.random.default_rng([s, 0, 0, 2])).st.dequantize()
                for s in range(cfg.bias_draws)]
        for n, e in zip(ns, mean_curve(outs, g, ns)):
            rows.append({"case": cell["case"], "recipe": recipe, "level": "operand", "n": n, "rel_err_mean": e})
    return {"bias": rows, "draws": draws_rows}


def _rht_signs(rng):
    return tuple(int(s) for s in rng.choice(np.array([-1, 1]), size=16))


def _eden(cfg, cell):
    g = _fc(cfg).dy.T.copy()            # wgrad layout: K = tokens along axis 1
    ns = _ns(cfg.bias_draws)
    e2m1, e4m3 = "e2m1fn", "e4m3fn"
    outs = {"sr-rht": [], "ms-eden-rht": []}
    for s in range(cfg.bias_draws):
        rng = np.random.default_rng([2, s])
        signs = _rht_signs(rng)
        y = rht(g, axis=1, signs=signs)
        q = quantize_nvfp4_te(y, NVFP4Quantizer(stochastic_rounding=True), axis=1, rng=rng)
        outs["sr-rht"].append(inverse_rht(q.dequantize(), axis=1, signs=signs))
        noise = rng.integers(0, 1 << 16, size=(y.shape[0], y.shape[1] // 16), dtype=np.uint16)
        codes, _, scode, t = ms_eden_nvfp4(y, np.float32(np.abs(y).max()), 1.0, noise)
        deq = (decode(codes, e2m1).astype(np.float32) * np.repeat(decode(scode, e4m3).astype(np.float32), 16, axis=1)
               * np.float32(t)).astype(np.float32)
        outs["ms-eden-rht"].append(inverse_rht(deq, axis=1, signs=signs))
    rows, ops = [], []
    g2 = float(np.sum(g.astype(np.float64) ** 2))
    for variant, o in outs.items():
        for n, e in zip(ns, mean_curve(o, g, ns)):
            rows.append({"case": "eden", "recipe": variant, "level": "operand", "n": n, "rel_err_mean": e})
        mse = float(np.mean([np.sum((d.astype(np.float64) - g) ** 2) / g2 for d in o]))
        ops.append({"finding": "f", "case": "grad_output", "variant": variant, "metric": "rel_mse", "value": mse})
    return {"bias": rows, "operands": ops}


def _operands(cfg, cell):
    corpus, _ = reference_states(cfg)
    step = max(cfg.checkpoints)
    model = _model_at(cfg, step)
    _, caps = capture(model, _loss_fn(*_probe_batch(cfg, corpus, step)))
    rows = []
    for name, cap in caps.items():                 # (b): the weight fprop sees against the one dgrad sees
        for recipe in ("te-nvfp4", "te-nvfp4-no-2d"):
            r = get_recipe(recipe)
            wf = r.operand("weight", cap.w.T, 0, "fprop").st.dequantize().astype(np.float64).T
            wd = r.operand("weight", cap.w, 0, "dgrad").st.dequantize().astype(np.float64)
            w = cap.w.astype(np.float64)
            rows.append({"finding": "b", "case": name, "variant": recipe, "metric": "weight_mismatch",
                         "value": float(norm(wf - wd) / norm(w))})
            dy = cap.dy.astype(np.float64)
            rows.append({"finding": "b", "case": name, "variant": recipe, "metric": "dgrad_vs_fprop_weight",
                         "value": float(norm(dy @ wd - dy @ wf) / norm(dy @ wf))})
    cap = caps["blocks.0.mlp.fc"]                 # (g): MXFP8 scale rules on the wgrad operands
    ref = exact_passes(cap.x, cap.w, None, cap.dy)["wgrad"]
    for rule in ("floor", "ceil", "even", "rceil"):
        a = quantize_mx(cap.dy.T, "e4m3fn", axis=1, scale_rule=rule)
        b = quantize_mx(cap.x, "e4m3fn", axis=0, scale_rule=rule)
        for what, st, src in (("grad_output", a, cap.dy.T), ("input", b, cap.x)):
            inv = np.repeat(st.scale_inv, 32, axis=1 if st is a else 0)[:src.shape[0], :src.shape[1]]
            sat = float(np.mean(np.abs(src.astype(np.float64)) > 448.0 * inv.astype(np.float64)))
            rows.append({"finding": "g", "case": what, "variant": rule, "metric": "frac_saturated", "value": sat})
            rows.append({"finding": "g", "case": what, "variant": rule, "metric": "rel_err",
                         "value": compare(st.dequantize(), src)["rel_err"]})
        dw = block_scaled_mm(a, b, accumulator="exact")
        rows.append({"finding": "g", "case": "wgrad", "variant": rule, "metric": "rel_err",
                     "value": compare(dw, ref)["rel_err"]})
    return {"operands": rows}


def _max_rel(a, e) -> float:
    """The largest ``|a - e| / |e|`` over the entries with ``|e|`` at least a tenth of the largest (NaN where none is:
    operands of a diverged run, NaN throughout, gave NumPy's "zero-size array to reduction operation maximum")."""
    big = np.abs(e) >= 0.1 * np.abs(e).max()
    return float(np.max(np.abs(a - e)[big] / np.abs(e)[big])) if big.any() else math.nan


def _ksweep(cfg, cell):
    cap = _fc(cfg, batch=cell["K"] // cfg.model.seq_len)
    stack, K = cell["stack"], cell["K"]
    exact = exact_passes(cap.x, cap.w, cap.b, cap.dy)["wgrad"]
    s = layer_passes(cap.x, cap.w, cap.b, cap.dy, "te-current", stack)["wgrad"].astype(np.float64)
    ea = layer_passes(cap.x, cap.w, cap.b, cap.dy, "te-current", exact_accumulation(stack))["wgrad"].astype(np.float64)
    return {"ksweep": [{"stack": stack, "K": K, "gemm": "wgrad", "recipe": "te-current",
                        "accum_err": float(norm(s - ea) / norm(exact)),
                        "accum_max_rel": _max_rel(s, ea),
                        "quant_err": compare(ea, exact)["rel_err"], "rel_err": compare(s, exact)["rel_err"]}]}


def _width(cfg, cell):
    """A square layer of ``width`` (fprop's and dgrad's K) on synthetic operands: GELU-shaped inputs
    (mostly positive, as an MLP's), weights of variance 1/width, Gaussian output gradients."""
    w_, m = cell["width"], cfg.width_tokens
    rng = np.random.default_rng([5, w_])
    z = rng.standard_normal((m, w_))
    x = (0.5 * z * (1 + np.tanh(0.7978845608 * (z + 0.044715 * z ** 3)))).astype(np.float32)
    w = (rng.standard_normal((w_, w_)) / math.sqrt(w_)).astype(np.float32)
    dy = (rng.standard_normal((m, w_)) * 1e-2).astype(np.float32)
    exact = exact_passes(x, w, None, dy)
    s = layer_passes(x, w, None, dy, "te-current", cell["stack"])
    ea = layer_passes(x, w, None, dy, "te-current", exact_accumulation(cell["stack"]))
    rows = []
    for gemm in ("fprop", "dgrad", "wgrad"):
        a, e = s[gemm].astype(np.float64), ea[gemm].astype(np.float64)
        rows.append({"stack": cell["stack"], "width": w_, "tokens": m, "gemm": gemm,
                     "K": m if gemm == "wgrad" else w_, "accum_err": norm(a - e) / norm(exact[gemm]),
                     "accum_max_rel": _max_rel(a, e),
                     "quant_err": compare(e, exact[gemm])["rel_err"]})
    return {"widths": rows}


def _spike(cfg, cell):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((cfg.spike_width, cfg.spike_width)) / math.sqrt(cfg.spike_width)).astype(np.float32)
    lin = nn.Linear(cfg.spike_width, cfg.spike_width, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
    model = nn.Sequential(lin)
    recipe = TEDelayedScaling(amax_history_len=cfg.spike_history) if cell["recipe"] == "te-delayed" \
        else get_recipe(cell["recipe"])
    emulate(model, recipe, "h100", diagnostics=True)
    rows = []
    steps = cfg.spike_at + cfg.spike_history + 8
    for step in range(steps):
        x = rng.standard_normal((cfg.spike_tokens, cfg.spike_width)).astype(np.float32)
        if step == cfg.spike_at:
            x[0, 0] = np.float32(cfg.spike_factor) * np.abs(x).max()
        with torch.no_grad():
            y = model(torch.from_numpy(x)).numpy()
        diag = [d for d in diagnostics(model) if d["pass"] == "fprop" and d["tensor"] == "input" and d["step"] == step]
        rows.append({"recipe": cell["recipe"], "history": cfg.spike_history, "step": step,
                     "spiked": int(step == cfg.spike_at),
                     "fprop_rel_err": compare(y, x.astype(np.float64) @ w.T.astype(np.float64))["rel_err"],
                     "frac_saturated": float(diag[0]["frac_saturated"]),
                     "frac_underflow": float(diag[0]["frac_underflow"])})
    return {"spike": rows}


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()


def _fork(cfg, cell):
    recipe, stack = cell["pair"].split("@")
    corpus, states = reference_states(cfg)
    xe, ye = eval_windows(corpus.val, cfg.model.batch * 2, cfg.model.seq_len)
    xe, ye = torch.from_numpy(xe), torch.from_numpy(ye)
    runs = {}
    for label in ("fp32", "recipe"):
        m = GPT(cfg.model, seed=0)
        m.load_state_dict(states[cfg.fork_at][0])
        theta0 = _flat(m)
        opt = _opt(m, cfg.lr)
        opt.load_state_dict(states[cfg.fork_at][1])
        if label == "recipe":
            emulate(m, recipe, stack, seed=0)
        evalm = GPT(cfg.model, seed=0)
        rng = np.random.default_rng([4, cfg.fork_at])
        losses, thetas = [], []
        for step in range(cfg.fork_steps + 1):
            with torch.no_grad():
                for pe, p in zip(evalm.parameters(), m.parameters()):
                    pe.copy_(p)
                losses.append(float(evalm.loss(xe, ye)))
            thetas.append(_flat(m))
            if step == cfg.fork_steps:
                break
            x, y = sample_batch(corpus.train, rng, cfg.model.batch, cfg.model.seq_len)
            opt.zero_grad(set_to_none=True)
            m.loss(torch.from_numpy(x), torch.from_numpy(y)).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
        runs[label] = (losses, thetas)
    rows = []
    for step in range(cfg.fork_steps + 1):
        lf, tf = runs["fp32"][0][step], runs["fp32"][1][step]
        lr_, tr = runs["recipe"][0][step], runs["recipe"][1][step]
        moved, dist = norm((tf - theta0).numpy()), norm((tr - tf).numpy())
        # 0 where neither fork has moved (step 0); NaN weights (a diverged run) were 0 too, "no drift", as NaN > 0 is
        # False
        rows.append({"label": cell["pair"], "step": step, "loss": lr_, "loss_fp32": lf, "loss_minus_fp32": lr_ - lf,
                     "weight_dist": dist / moved if moved > 0 else 0.0 if moved == dist == 0 else math.nan})
    return {"forks": rows}


_KINDS = {"probe": _probe, "bias": _bias, "eden": _eden, "operands": _operands, "ksweep": _ksweep,
          "width": _width, "spike": _spike, "fork": _fork}


def run_cell(cfg_dict: dict, cell: dict) -> dict:
    """Run one cell on one thread (torch and fp8emu); returns ``{table: rows}``."""
    cfg = GradConfig.from_dict(cfg_dict)
    if not isinstance(cell, dict) or cell not in plan_cells(cfg):
        raise ValueError(f"cell {cell!r} is not a cell of this configuration (plan_cells lists them)")
    old_threads, old_fp8 = torch.get_num_threads(), parallel.get_threads()
    torch.set_num_threads(1)
    parallel.set_threads(1)
    try:
        return _KINDS[cell["kind"]](cfg, cell)
    finally:
        torch.set_num_threads(old_threads)
        parallel.set_threads(old_fp8)
