"""The language-model study's float32 evaluation and fork design (``fp8emu train-study --forks``).

Expectations are derived here: the float32 loss from a plain torch forward of the same weights, window by
window, summed in float64; the shared checkpoint from a training loop written out from the documented schedule;
the statistics from Python's ``statistics`` module and the standard t table.
"""

import csv
import dataclasses
import math
import statistics

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch as fp8torch  # noqa: E402
from fp8emu.cli import main  # noqa: E402
from fp8emu.lab import lm_forks  # noqa: E402
from fp8emu.torch.study import corpus as corpus_mod  # noqa: E402
from fp8emu.torch.study import train  # noqa: E402
from fp8emu.torch.study.model import GPT, ModelConfig  # noqa: E402

MC = ModelConfig(n_layer=1, d_model=32, n_head=2, seq_len=16, batch=2)
TC = train.TrainConfig(steps=6, warmup=2, eval_every=3, eval_windows=2, final_windows=2, fork_at=4)


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- float32 on the whole split

def test_split_windows_predict_every_byte_once():
    for size, L in ((12, 4), (13, 4), (100, 7), (17, 16)):
        data = np.arange(size, dtype=np.uint8)
        x, y, m = corpus_mod.split_windows(data, L)
        predicted = sorted(int(t) for row_y, row_m in zip(y, m) for t, c in zip(row_y, row_m) if c)
        assert predicted == list(range(1, size)), (size, L)
        assert (y[:, :-1] == x[:, 1:]).all() and (y == x + 1).all()
    with pytest.raises(ValueError, match="hold no window"):
        corpus_mod.split_windows(np.arange(4, dtype=np.uint8), 4)


def _plain_loss(model, data, L):
    """Per target t = 1..n: the context is its back-to-back window, or for the tail the window ending at n."""
    n = data.size - 1
    full = n // L * L
    total = 0.0
    with torch.no_grad():
        for start, tail in [(s, False) for s in range(0, full, L)] + ([(n - L, True)] if full < n else []):
            x = torch.from_numpy(data[start:start + L].astype(np.int64))[None]
            logp = torch.log_softmax(model(x)[0].double(), -1)
            for j in range(L):
                t = start + j + 1
                if not tail or t > full:
                    total -= float(logp[j, int(data[t])])
    return total / n


def test_fp32_eval_is_a_plain_torch_forward_of_the_same_weights():
    data = corpus_mod.load_corpus().val[:16 * 9 + 5]        # 9 whole windows and a tail of 4 targets
    model = GPT(MC, seed=3)
    got = train.evaluate_fp32(model, data, MC)
    assert got == pytest.approx(_plain_loss(model, data, MC.seq_len), rel=1e-6)


def test_fp32_eval_of_an_emulated_model_ignores_its_quantization():
    if not hasattr(fp8torch, "emulate"):
        pytest.skip("fp8emu.torch.emulate is not in this installation")
    data = corpus_mod.load_corpus().val[:200]
    plain = GPT(MC, seed=5)
    emulated = GPT(MC, seed=5)
    fp8torch.emulate(emulated, recipe="te-delayed", gpu="h100", seed=0)
    assert train.evaluate_fp32(emulated, data, MC) == train.evaluate_fp32(plain, data, MC)
    with torch.no_grad():
        x, y = (torch.from_numpy(a) for a in corpus_mod.eval_windows(data, 2, MC.seq_len))
        assert float(emulated.loss(x, y)) != float(plain.loss(x, y))    # its own forward does quantize


# --------------------------------------------------------------------------- the shared checkpoint

def _lr(step, tc):   # the documented schedule: linear warm-up, cosine to a tenth
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    return tc.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - tc.warmup) / (tc.steps - tc.warmup))))


def test_the_checkpoint_is_the_fp32_run_of_seed_0_step_for_step():
    spec = train.RunSpec("fp32", None, 1, MC, TC)
    state, _, sha = train.trunk(spec)
    c = corpus_mod.load_corpus()
    model = GPT(MC, seed=0)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=TC.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(0)
    for step in range(TC.fork_at):
        x, y = corpus_mod.sample_batch(c.train, rng, MC.batch, MC.seq_len)
        for g in opt.param_groups:
            g["lr"] = _lr(step, TC)
        opt.zero_grad()
        model.loss(torch.from_numpy(x), torch.from_numpy(y)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TC.clip)
        opt.step()
    for k, v in model.state_dict().items():
        assert torch.equal(state[k], v), k
    assert len(sha) == 64 and train.trunk(spec)[2] == sha


def test_every_fork_starts_from_the_checkpoint_on_the_same_batches():
    runs = {r: train.train_run(train.RunSpec(r, None, 2, MC, TC)) for r in ("fp32", "bf16")}
    assert runs["fp32"]["trunk_sha256"] == runs["bf16"]["trunk_sha256"]
    assert runs["fp32"]["eval_steps"] == [4, 6] and len(runs["fp32"]["train_loss"]) == 2
    state, _, _ = train.trunk(train.RunSpec("fp32", None, 2, MC, TC))
    model = GPT(MC, seed=0)
    model.load_state_dict(state)
    x, y = corpus_mod.sample_batch(corpus_mod.load_corpus().train, np.random.default_rng((2, 4)), MC.batch,
                                   MC.seq_len)
    with torch.no_grad():
        first = float(model.loss(torch.from_numpy(x), torch.from_numpy(y)))
    assert runs["fp32"]["train_loss"][0] == first                      # the fork's first batch, float32
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert runs["bf16"]["train_loss"][0] == float(model.loss(torch.from_numpy(x), torch.from_numpy(y)))
    c = corpus_mod.load_corpus()
    assert runs["fp32"]["fp32_val_loss"] == runs["fp32"]["fp32_val_loss"] > 0
    assert runs["fp32"]["fp32_window_loss"] == runs["fp32"]["final_val_loss"]   # fp32 forward: the same
    assert runs["bf16"]["fp32_window_loss"] != runs["bf16"]["final_val_loss"]   # bf16's own forward is not
    assert c.val.size > 0


@pytest.mark.parametrize("fork_at", [6, 7, -1, True])
def test_a_fork_must_train_at_least_one_step(fork_at):
    with pytest.raises(ValueError, match="fork_at must be an integer from 0"):
        dataclasses.replace(TC, fork_at=fork_at).check()


def test_fork_at_beyond_the_steps_is_one_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["train-study", "--quick", "--fork-at", "24", "--recipes", "none", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fork-at 24 needs --steps above 24, got --steps 24 (the preset's)" in err[0] \
        and not out.exists()


def test_a_scratch_study_keeps_its_files_without_fork_at():
    d = train.RunSpec("fp32", None, 0, MC, dataclasses.replace(TC, fork_at=0)).as_dict()
    assert "fork_at" not in d["train"] and train.RunSpec.from_dict(d).train.fork_at == 0


# --------------------------------------------------------------------------- a fork study end to end

@pytest.fixture(scope="module")
def fork_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("forks") / "f"
    argv = ["train-study", "--quick", "--forks", "--recipes", "none", "--steps", "6", "--fork-at", "4",
            "--eval-every", "2", "--seeds", "3", "--seq-len", "16", "--batch", "2", "--infer-windows", "2",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    return out


def test_fork_study_tables_and_report(fork_study):
    rows = _csv(fork_study / "runs.csv")
    assert len(rows) == 6 and {r["fork_at"] for r in rows} == {"4"} and len({r["trunk_sha256"] for r in rows}) == 1
    text = (fork_study / "report.md").read_text(encoding="utf-8")
    assert "## Forks: resolution of the two designs" in text and "float32, whole validation split" in text
    # the report's fp32 gap is the mean over seeds of fp32 minus bf16 at the same seed, from runs.csv
    loss = {(r["recipe"], int(r["seed"])): float(r["fp32_val_loss"]) for r in rows}
    gaps = [loss[("fp32", k)] - loss[("bf16", k)] for k in range(3)]
    g = {r["label"]: r for r in lm_forks.paired_gaps(lm_forks.read_study_csv(fork_study / "runs.csv"))}["fp32"]
    assert g["gap"] == pytest.approx(statistics.mean(gaps), abs=1e-15)
    assert g["sd"] == pytest.approx(statistics.stdev(gaps), rel=1e-12)
    assert g["half"] == pytest.approx(4.302652729749464 * statistics.stdev(gaps) / math.sqrt(3), rel=1e-12)


def test_fork_study_on_dask_gives_the_same_bits(fork_study, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "d"
    argv = ["train-study", "--quick", "--forks", "--recipes", "none", "--steps", "6", "--fork-at", "4",
            "--eval-every", "2", "--seeds", "3", "--seq-len", "16", "--batch", "2", "--no-report",
            "--out", str(out), "--quiet", "--workers", "2"]
    assert main(argv) == 0
    key = ("run_id", "final_val_loss", "fp32_val_loss", "fp32_window_loss", "trunk_sha256")
    assert [[r[k] for k in key] for r in _csv(out / "runs.csv")] == \
        [[r[k] for k in key] for r in _csv(fork_study / "runs.csv")]


def test_runs_of_two_checkpoints_are_refused():
    rows = [{"recipe": "bf16", "stack": "", "seed": 0, "fork_at": 4, "trunk_sha256": "a", "steps": 2},
            {"recipe": "fp32", "stack": "", "seed": 0, "fork_at": 4, "trunk_sha256": "b", "steps": 2}]
    with pytest.raises(ValueError, match="2 different checkpoints"):
        lm_forks.fork_info(rows)
    with pytest.raises(ValueError, match="not one fork study"):
        lm_forks.fork_info([dict(rows[0], fork_at=0)])


def test_resolution_counts_identical_results_once():
    gaps = [{"stack": "x", "label": lab, "sd": sd, "half": 2 * sd} for lab, sd in (("a@x", 1.0), ("b@x", 1.0),
                                                                                   ("c@x", 3.0), ("d@x", 5.0))]
    assert lm_forks.resolution(gaps)["sd"] == 2.0                       # median of 1, 1, 3, 5
    r = lm_forks.resolution(gaps, same=[["a@x", "b@x"]])
    assert (r["n"], r["sd"], r["half"]) == (3, 3.0, 6.0)                # median of 1, 3, 5


def test_a_pairs_seed_count_is_the_seeds_its_gap_is_paired_over():
    # seed 2 has no bf16 run: the gap (and its interval) is over seeds 0 and 1 only, and says so
    rows = [{"recipe": r, "stack": st, "seed": k, "fp32_val_loss": v, "diverged": 0}
            for r, st, k, v in [("bf16", "", 0, 2.0), ("bf16", "", 1, 2.5),
                                ("a", "x", 0, 2.25), ("a", "x", 1, 2.5), ("a", "x", 2, 9.0)]]
    g = {r["label"]: r for r in lm_forks.paired_gaps(rows)}["a@x"]
    assert g["seeds"] == 2
    assert g["gap"] == 0.125
