"""Summation orders revealed by probing (fp8emu.gemm.sumtree) and chosen per machine (fp8emu.gemm.cpu_order).

Without torch: black boxes whose order is known by construction (written here in plain float32 /
exact-rational arithmetic, not with fp8emu's evaluator) must be revealed exactly.  With torch: torch's
own ``mm`` and ``_scaled_mm`` on whatever CPU runs the suite, under three MKL kernels of this machine
(the default, ``MKL_ENABLE_INSTRUCTIONS=AVX2`` and ``MKL_CBWR=COMPATIBLE``, each in a fresh process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from fractions import Fraction

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.order_probe import NotATreeError, reveal
from fp8emu.gemm.sumtree import SumTree, evaluate


def _intel_without_mkl_settings(monkeypatch):
    """Pretend the CPU the recorded model was proven on, whatever runs the suite (AMD, or MKL settings set)."""
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)          # no torch: the recorded model
    for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"avx2", "avx512f"})))


def _fma32(c, x, y):
    """float32 FMA, exactly: the float32 nearest to c + x*y (ties to even), by rational arithmetic."""
    v = Fraction(float(c)) + Fraction(float(x)) * Fraction(float(y))
    lo = np.float32(float(v))               # within one float32 step of v
    cands = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
    best = min(cands, key=lambda f: (abs(Fraction(float(f)) - v), int(np.float32(f).view(np.int32)) & 1))
    return np.float32(best)


def _box(kind, fma=True):
    """A GEMM ``mm(a, b)`` summing every output in a known order, written out directly."""
    def add(c, x, y):
        return _fma32(c, x, y) if fma else np.float32(c + np.float32(x * y))

    def dot(a, b):
        K = a.shape[0]
        if kind == "chain":
            c = np.float32(0)
            for k in range(K):
                c = add(c, a[k], b[k])
            return c
        if kind == "lanes4":                      # four accumulators k mod 4, then (l0 + l1) + (l2 + l3)
            acc = [np.float32(0)] * 4
            for k in range(K):
                acc[k % 4] = add(acc[k % 4], a[k], b[k])
            return np.float32(np.float32(acc[0] + acc[1]) + np.float32(acc[2] + acc[3]))
        if kind == "blocks5":                     # chains over blocks of 5, block sums added in order
            total = None
            for k0 in range(0, K, 5):
                c = np.float32(0)
                for k in range(k0, min(K, k0 + 5)):
                    c = add(c, a[k], b[k])
                total = c if total is None else np.float32(total + c)
            return total
        raise AssertionError(kind)

    def mm(a, b):
        return np.array([[dot(a[m], b[:, n]) for n in range(b.shape[1])] for m in range(a.shape[0])], np.float32)
    return mm


@pytest.mark.parametrize("kind,nested", [
    ("chain", lambda K: _chain(range(K))),
    ("lanes4", lambda K: ((_chain(range(0, K, 4)), _chain(range(1, K, 4))),
                          (_chain(range(2, K, 4)), _chain(range(3, K, 4))))),
    ("blocks5", lambda K: _left([_chain(range(k, min(K, k + 5))) for k in range(0, K, 5)])),
])
@pytest.mark.parametrize("fma", [True, False])
def test_reveal_finds_the_order_it_was_given(kind, nested, fma):
    M, K, N = 3, 17, 2
    order, facts = reveal(_box(kind, fma), M, K, N, check=4)
    assert order.uniform and facts["explained"] == 1.0
    assert order.trees[0] == SumTree.from_nested(nested(K), fma)
    assert order.trees[0].fma is fma


def _chain(ks):
    ks = list(ks)
    t = ks[0]
    for k in ks[1:]:
        t = (t, k)
    return t


def _left(items):
    t = items[0]
    for i in items[1:]:
        t = (t, i)
    return t


def test_outputs_with_different_orders_are_revealed_each():
    """Row 0 sums in one chain, row 1 in lanes: the packed probe cannot hold both, the per-output one does."""
    chain, lanes = _box("chain"), _box("lanes4")

    def mm(a, b):
        out = chain(a, b)
        out[1:] = lanes(a[1:], b)
        return out
    order, facts = reveal(mm, 2, 12, 3, check=4)
    assert facts["explained"] == 1.0 and len(order.trees) == 2
    assert order.trees[order.classes[0, 0]] == SumTree.from_nested(_chain(range(12)))
    assert order.trees[order.classes[1, 2]] == SumTree.from_nested(
        ((_chain(range(0, 12, 4)), _chain(range(1, 12, 4))), (_chain(range(2, 12, 4)), _chain(range(3, 12, 4)))))
    assert order.trees[order.classes[1, 2]].describe() == "[0:9:4] + [1:10:4] + ([2:11:4] + [3:12:4])"


def test_a_sum_that_is_no_tree_is_not_passed_off_as_one():
    """Float64 accumulation rounded once is no float32 tree: the order found cannot explain it."""
    def mm(a, b):
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    try:
        order, facts = reveal(mm, 3, 40, 3)
    except NotATreeError:
        return
    assert facts["explained"] < 1.0


def test_describe_and_blocks():
    assert SumTree.blocks([0, 384, 704, 1024]).describe() == "[0:384] + [384:704] + [704:1024]"
    t = SumTree.from_nested((((0, 2), 4), ((1, 3), 5)), fma=False)
    assert t.describe() == "[0:5:2] + [1:6:2]" and not t.fma      # Python slices: 0, 2, 4 and 1, 3, 5
    with pytest.raises(ValueError, match="leaves must be 0 .. K-1"):
        SumTree.from_nested(((0, 2), 3))
    with pytest.raises(ValueError, match="K={}".format(6)):
        evaluate(t, np.ones((1, 5), np.float32), np.ones((5, 1), np.float32))


def test_a_recorded_model_off_its_cpu_warns(monkeypatch):
    _intel_without_mkl_settings(monkeypatch)
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("AuthenticAMD", "AMD EPYC", frozenset({"avx2", "avx512f"})))
    with pytest.warns(RuntimeWarning, match="AuthenticAMD.*is not the one mkl-2024.2-avx512 was proven on"):
        order, src = cpu_order.order_for(4, 64, 4, threads=1)
    assert src == "mkl-2024.2-avx512"
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"avx2", "avx512f"})))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_order.order_for(4, 64, 4, threads=1)[1] == "mkl-2024.2-avx512"
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")               # another MKL kernel on the same CPU
    with pytest.warns(RuntimeWarning, match="MKL settings"):
        cpu_order.order_for(4, 64, 4, threads=1)


def test_policy_names_what_it_accepts(monkeypatch):
    with pytest.raises(ValueError, match="use 'auto', 'revealed' or a recorded model"):
        with cpu_order.use("intel"):
            pass
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl")
    with pytest.raises(ValueError, match="environment variable FP8EMU_CPU_ORDER = 'mkl'"):
        cpu_order.policy()
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    with pytest.raises(RuntimeError, match="needs torch"):
        cpu_order.order_for(2, 8, 2)


# ----------------------------------------------------------------------------- live torch, three MKL kernels
_LIVE = r"""
import json, os, sys, warnings
import numpy as np, torch
import fp8emu
from fp8emu.gemm import cpu_order
from fp8emu.gemm.torch_cpu import sgemm, torch_cpu_mm, cpu_path
from fp8emu.formats import get_format
rng = np.random.default_rng(int(sys.argv[1]))
tdt = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
rows = []
for trial in range(int(sys.argv[2])):
    threads = int(rng.choice([1, 2]))
    torch.set_num_threads(threads)
    M, N = int(rng.choice([1, 2, 3, 7, 16, 33])), int(rng.choice([1, 2, 5, 16, 31]))
    K = int(rng.choice([16, 48, 208, 512, 1000, 1024, 2048, 4096]))
    lay = str(rng.choice(["NN", "NT", "TN", "TT"]))
    x = rng.standard_normal((M, K)).astype(np.float32)
    y = (rng.standard_normal((K, N)) * np.exp2(rng.integers(-8, 9, (K, N)))).astype(np.float32)
    tx = torch.from_numpy(np.ascontiguousarray(x.T)).T if lay[0] == "T" else torch.from_numpy(x)
    ty = torch.from_numpy(np.ascontiguousarray(y.T)).T if lay[1] == "T" else torch.from_numpy(y)
    want = torch.mm(tx, ty).numpy()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = sgemm(x, y, threads=threads, layout=lay)
    rows.append(["mm", M, K, N, lay, threads, int((want.view(np.int32) != got.view(np.int32)).sum()), len(w)])
    fa, fb = [str(v) for v in rng.choice(["e4m3fn", "e5m2"], 2)]
    rowwise = bool(rng.random() < 0.5)
    a = torch.from_numpy(x).to(tdt[fa])
    b = torch.from_numpy(np.ascontiguousarray(y.T)).to(tdt[fb]).t()
    sa = torch.from_numpy((rng.random((M, 1)) + .5).astype(np.float32)) if rowwise else torch.tensor(1.25)
    sb = torch.from_numpy((rng.random((1, N)) + .5).astype(np.float32)) if rowwise else torch.tensor(0.75)
    try:
        want = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float32).numpy()
    except RuntimeError:
        continue
    path = cpu_path(fa, fb, tensorwise=not rowwise)
    ca = a.view(torch.uint8).numpy()
    cb = np.ascontiguousarray(b.t().contiguous().view(torch.uint8).numpy().T)
    t = (lambda s: None if rowwise else s.numpy()), (lambda s: s.numpy() if rowwise else None)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = torch_cpu_mm(path, ca, get_format(fa), cb, get_format(fb), t[0](sa), t[1](sa), t[0](sb), t[1](sb))
    rows.append([path, M, K, N, fa + "x" + fb, threads, int((want.view(np.int32) != got.view(np.int32)).sum()),
                 len(w)])
print(json.dumps(rows))
"""


# 12 random calls under the kernel torch picks by default, 6 under each of the other two: their first 6
# draws already span K 48..4096, M and N 1..31, 1 and 2 threads and both CPU paths, and the next 6 (revealing
# their orders) cost the CBWR kernel 77 s of CPU on 2 cores, the AVX2 one 15 s.
@pytest.mark.parametrize("env, trials", [({}, 12), ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, 6),
                                         ({"MKL_CBWR": "COMPATIBLE"}, 6)],
                         ids=["default", "avx2", "cbwr-compatible"])
def test_live_torch_gemms_equal_the_revealed_order_or_warn(env, trials, tmp_path):
    """Random torch.mm and _scaled_mm calls (M, N from 1, K to 4096, 1 and 2 threads, every layout, both CPU
    paths, E4M3/E5M2 mixes, tensor-wise and row-wise scales) equal the emulation bit for bit, or it warned."""
    pytest.importorskip("torch")
    seed = {"": 1, "AVX2": 2, "COMPATIBLE": 3}["".join(env.values())]
    e = {**os.environ, **env, "FP8EMU_CACHE": str(tmp_path), "FP8EMU_CPU_ORDER": "auto"}
    out = subprocess.run([sys.executable, "-c", _LIVE, str(seed), str(trials)], capture_output=True, text=True,
                         env=e, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(rows) >= 3 * trials // 2
    silent = [r for r in rows if r[6] and not r[7]]
    assert not silent, f"outputs differ without a warning: {silent}"
    exact = [r for r in rows if r[1] >= 2 and r[3] >= 2]
    assert exact and all(r[6] == 0 for r in exact), [r for r in exact if r[6]]
    assert (tmp_path / "cpu-order.json").exists()            # revealed once, kept for the next process


@pytest.mark.parametrize("emulate", [False, True])
@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise", "rowwise_with_gw_hp"])
def test_torchao_on_the_cpu_trains_as_real_torchao(granularity, emulate):
    """Real torchao Float8Linear (emulate=False: its GEMMs through torch._scaled_mm on this CPU; emulate=True:
    torch.mm of the dequantized operands) against emulate() on the cpu stack (torchao=None for the former):
    every loss, gradient and weight equal over four AdamW steps on torch's current thread count, layers of 96
    and 40 features converted (as torchao converts them), the bias gradient torch's own; an empty batch gives
    an empty output."""
    torch = pytest.importorskip("torch")
    f8 = pytest.importorskip("torchao.float8")
    ft = pytest.importorskip("fp8emu.torch")
    import copy
    import dataclasses
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 40))
    ref, emu = copy.deepcopy(base), copy.deepcopy(base)
    cfg = f8.Float8LinearConfig.from_recipe_name(granularity)
    f8.convert_to_float8_training(ref, config=dataclasses.replace(cfg, emulate=emulate))
    stack = ft.get_stack("cpu") if emulate else dataclasses.replace(ft.get_stack("cpu"), torchao=None)
    recipe = "torchao-" + granularity.replace("_with_", "-").replace("_", "-")
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # in the range revealed here: nothing to warn about
        report = ft.emulate(emu, recipe, stack)
        assert list(report.swapped) == ["0", "2"] and not report.skipped
        oa, ob = torch.optim.AdamW(ref.parameters(), lr=1e-2), torch.optim.AdamW(emu.parameters(), lr=1e-2)
        for _ in range(4):
            x = torch.randn(192, 64)
            la, lb = ref(x).square().mean(), emu(x).square().mean()
            oa.zero_grad()
            ob.zero_grad()
            la.backward()
            lb.backward()
            assert la.item() == lb.item()
            assert all(torch.equal(p.grad, q.grad) for p, q in zip(ref.parameters(), emu.parameters()))
            oa.step()
            ob.step()
            assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), emu.parameters()))
        assert emu(torch.zeros(0, 64)).shape == (0, 40)


def test_an_empty_batch_is_empty_on_every_recipe():
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    for recipe in ft.recipe_names():
        m = torch.nn.Sequential(torch.nn.Linear(64, 32))
        try:
            ft.emulate(m, recipe, "cpu")
        except ValueError:
            ft.emulate(m, recipe, "b200")
        assert m(torch.zeros(0, 64)).shape == (0, 32), recipe


def test_cli_names_what_it_found_and_refuses_bad_shapes(capsys, monkeypatch):
    from fp8emu.cli import main
    assert main(["cpu-order", "--recorded"]) == 0
    assert "mkl-2024.2-avx512: Intel Xeon with AVX-512 and AMX" in capsys.readouterr().out
    assert main(["cpu-order", "64x0x3"]) == 2
    assert "a shape is MxKxN with positive integers" in capsys.readouterr().err
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    assert main(["cpu-order", "--json", "--threads", "1", "4x1024x4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gemms"][0]["order"] == "fma [0:384] + [384:704] + [704:1024] (fma start)"
    assert out["gemms"][0]["source"] == "mkl-2024.2-avx512"


# ----------------------------------------------------------------------------- hostile input (tests/AUDIT.md)
def test_sgemm_refuses_what_it_cannot_multiply():
    from fp8emu.gemm.torch_cpu import sgemm
    f32 = np.float32
    with cpu_order.use("mkl-2024.2-avx512"):
        with pytest.raises(ValueError, match="inner dimensions must match"):     # was a silent 2x3 result
            sgemm(np.ones((2, 3), f32), np.ones((4, 3), f32))
        with pytest.raises(ValueError, match="must be a 2-D matrix"):
            sgemm(np.ones(4, f32), np.ones((4, 3), f32))
        for bad in (np.float64, np.int64, np.complex64):
            with pytest.raises(TypeError, match="must be float32"):
                sgemm(np.ones((2, 3), bad), np.ones((3, 3), f32))
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            sgemm(np.ones((2, 3), f32), np.ones((3, 3), f32), threads=0)
        z = sgemm(np.ones((2, 0), f32), np.ones((0, 3), f32))                  # torch.mm: zeros, not an error
        assert z.shape == (2, 3) and not z.any() and not np.signbit(z).any()


def test_a_damaged_cache_entry_is_probed_again(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    cpu_order.order_for(2, 40, 3, threads=1)
    path = cpu_order.cache_path()
    data = json.loads(path.read_text())
    key = next(iter(data))
    data[key] = {"order": {"trees": "x"}}
    path.write_text(json.dumps(data))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    order, src = cpu_order.order_for(2, 40, 3, threads=1)                    # raised KeyError before
    assert src == "revealed" and order.trees[0].K == 40


def test_the_guide_states_the_committed_survey():
    """docs/guides/torch.md's survey sentence, recomputed from docs/data/cpu-order/ (tools/record_cpu_order.py):
    every order torch took on that Xeon (the recorded ``describe()`` text) is the recorded model's."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    rows = json.loads((root / "docs/data/cpu-order/xeon-amx-mkl-2024.2.json").read_text())["gemms"]
    text = " ".join((root / "docs/guides/torch.md").read_text().split())
    rec = cpu_order.RECORDED["mkl-2024.2-avx512"]
    same = [r for r in rows if r["order"] == rec.order(r["M"], r["K"], r["N"], r["threads"]).describe()]
    split = [r for r in rows if " + (" in r["order"]]          # a second half summed apart: "... + (X + Y)"
    assert f"({len({(r['M'], r['K'], r['N']) for r in rows})} shapes, 1 and 2 threads)" in text
    assert f"all {len(rows)} GEMMs are explained" in text and all(r["explained"] == 1.0 for r in rows)
    assert len(same) == len(rows) and f"all {len(same)} are in the recorded model's order" in text
    assert f"({len(split)} of them two-thread GEMMs whose K is split)" in text
    assert all(r["threads"] == 2 and r["K"] > 768 and r["M"] * r["N"] * r["K"] > 192_000 for r in split)


@pytest.mark.parametrize("name", ["xeon-amx-mkl-2024.2-starts.json", "xeon-amx-mkl-2024.2-compatible-starts.json"])
def test_the_guide_states_the_committed_starts_survey(name):
    """How torch's sums started on that Xeon (tools/record_cpu_order.py --starts, torch's answers to products
    of -0 terms): the recorded model starts every output of a shape it calls proven alike, and the guide's
    counts are the file's."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    doc = json.loads((root / "docs/data/cpu-order" / name).read_text())
    rec, rows = cpu_order.RECORDED[doc["model"]], doc["gemms"]
    proven = [r for r in rows if rec.unproven(r["M"], r["K"], r["N"], r["threads"], r["layout"]) is None]
    assert proven == [r for r in rows if r["proven"]] and proven
    assert all(r["model_agrees"] == r["outputs"] and r["explained"] == 1.0 for r in proven)
    # the model's starts, recomputed here, are those the file says agreed
    for r in rows:
        order = rec.order(r["M"], r["K"], r["N"], r["threads"])
        said = np.array([t.start for t in order.trees])[order.classes]
        if r["model_agrees"] == r["outputs"]:
            assert set(said.ravel()) == set(r["starts"]), r
    text = " ".join((root / "docs/guides/torch.md").read_text().split())
    other = [r for r in rows if r["model_agrees"] < r["outputs"]]
    assert f"({len({(r['M'], r['K'], r['N']) for r in rows})} shapes, every layout, 1 and 2 threads" in text
    if doc["model"] == "mkl-2024.2-avx512":
        assert (f"in the {len(proven)} GEMMs the model calls proven every output starts as it says, and "
                f"{len(other)} of the {len(rows) - len(proven)} it warns about start otherwise" in text)
        assert all(min(r["M"], r["N"]) == 1 or r["layout"][1] == "T" for r in other)
    else:
        assert not other and f"as `{rec.name}` says in all {len(rows)} GEMMs" in text


def test_the_recorded_model_holds_wherever_it_claims_on_random_shapes():
    """Random torch.mm shapes checked on the AMX Xeon (tools/record_cpu_order.py --random 300): every shape
    where torch's outputs differed from the model is one the model warns about, and the guide says so."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    doc = json.loads((root / "docs/data/cpu-order/xeon-amx-mkl-2024.2-random.json").read_text())
    rec = cpu_order.RECORDED[doc["model"]]
    rows = doc["gemms"]
    proven = [r for r in rows if rec.unproven(r["M"], r["K"], r["N"], r["threads"]) is None]
    assert not [r for r in proven if r["differ"]]
    assert {r["threads"] for r in proven} == {1, 2} and max(min(r["M"], r["N"]) for r in proven) >= 192
    warned_differ = sum(r["differ"] > 0 for r in rows if r not in proven)
    text = " ".join((root / "docs/guides/torch.md").read_text().split())
    assert (f"`--random {len(rows)}` checks the model" in text and f"in the {len(proven)} shapes the model calls "
            f"proven no output differs, and {warned_differ} of the {len(rows) - len(proven)} shapes it warns about "
            "do differ" in text)


def test_the_recorded_model_splits_k_on_two_threads_as_measured():
    """Orders revealed on the AMX Xeon (tools/record_cpu_order.py, 2026-12-06), written out by hand."""
    rec = cpu_order.RECORDED["mkl-2024.2-avx512"]
    assert rec.order(32, 769, 32, 2).describe() == "fma [0:193] + [193:385] + [385:769] (fma start)"
    # the lone block [768:769] is summed apart (tests/test_cpu_order_lone_product.py)
    assert rec.order(32, 1537, 32, 2).describe() == ("fma [0:384] + [384:768] + [768:769] + ([769:1153] + [1153:1537]) "
                                                     "(fma start)")
    assert rec.order(8, 3500, 8, 2).describe().startswith("fma [0:384] + [384:768] + [768:1152] + [1152:1536] + "
                                                          "[1536:1750] + ([1750:2134] + ")
    assert rec.order(8, 3000, 8, 2).describe().endswith("[1920:2304] + [2304:2652] + [2652:3000] (fma start)")   # 192,000: one
    assert rec.order(23, 1212, 7, 2).describe() == "fma [0:303] + [303:606] + ([606:909] + [909:1212]) (fma start)"  # 195,132
    # both M and N >= 192: the packing driver's plain blocks, on one thread too
    assert rec.order(192, 800, 192, 1).describe() == "fma [0:384] + [384:768] + [768:800] (fma start)"
    assert rec.order(191, 800, 192, 1).describe() == "fma [0:384] + [384:592] + [592:800] (fma start)"
    assert rec.order(192, 500, 192, 1).describe() == "fma [0:250] + [250:500] (fma start)"


def test_the_recorded_model_warns_where_the_thread_split_was_not_measured(monkeypatch):
    _intel_without_mkl_settings(monkeypatch)
    for shape, threads, why in [((200, 1000, 200), 2, "proven for M, N <= 128"),
                                ((8, 3020, 8), 2, "between 192,000 and 195,132"),
                                ((8, 1000, 8), None, "thread count is not known"),
                                ((8, 64, 8), 4, "1 and 2 thread"),
                                ((8, 5000, 8), 1, "K <= 4096"),
                                ((1, 64, 8), 1, "gemv")]:
        with pytest.warns(RuntimeWarning, match=why):
            cpu_order.order_for(*shape, threads=threads)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for shape, threads in [((128, 4096, 128), 2), ((600, 768, 600), 2), ((1000, 4096, 1000), 1),
                               ((8, 768, 8), None)]:
            cpu_order.order_for(*shape, threads=threads)


def test_a_thread_count_setting_is_not_another_kernel(monkeypatch):
    """MKL_NUM_THREADS (which dask.distributed sets in its client's process) picks no other kernel."""
    _intel_without_mkl_settings(monkeypatch)
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_order.order_for(4, 64, 4, threads=1)[1] == "mkl-2024.2-avx512"
