"""MKL's default sgemm on an AMD EPYC as a recorded model, ``mkl-2024.2-amd-avx2``.

Expectations come from what torch's ``mm`` did on two such CPUs (2-vCPU KVM "AMD EPYC"s, torch 2.13.0+cpu,
MKL 2024.2, 2026-12-07): one of family 23 with AVX2 and no AVX-512, one of family 25 model 17 (Zen 4) with
AVX-512, where MKL took the same AVX2 kernels; the survey, starts and random shapes recorded by
tools/record_cpu_order.py on each (docs/data/cpu-order/epyc-avx2-*.json, epyc-zen4-*.json), and the trees and
per-output maps the probe revealed on the first, written out by hand below.  With torch, a live check runs on every CPU: where the model
is not this CPU's, it must warn.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.sumtree import SumTree

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs/data/cpu-order"
NAME = "mkl-2024.2-amd-avx2"
MODEL = cpu_order.RECORDED[NAME]
#: the recordings of each EPYC, and whether its CPU had AVX-512
EPYCS = [("epyc-avx2-mkl-2024.2", False), ("epyc-zen4-mkl-2024.2", True)]


def _pretend(monkeypatch, vendor="AuthenticAMD", flags=("avx", "avx2", "fma"), mkl_env=None):
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)          # no torch: a recorded model
    for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE"):
        monkeypatch.delenv(var, raising=False)
    for k, v in (mkl_env or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: (vendor, "AMD EPYC", frozenset(flags)))


def test_the_trees_are_those_revealed_written_out():
    # 4x16x6 NN, an output before C's 16-byte boundary: per 8 products, 4 join one by one, 4 are summed apart
    assert cpu_order._peel_tree(16) == SumTree.from_nested(
        (((((((((0, 1), 2), 3), (((4, 5), 6), 7)), 8), 9), 10), 11), (((12, 13), 14), 15)), fma=False)
    # 4x18x6: the two products past the last 8 join one by one
    assert cpu_order._peel_tree(18) == SumTree.from_nested(
        (((((((((((0, 1), 2), 3), (((4, 5), 6), 7)), 8), 9), 10), 11), (((12, 13), 14), 15)), 16), 17), fma=False)
    # 4x23x6 and 4x9x6 NN: the products past the last whole 8 join one by one, however many (K = 7: one chain)
    assert cpu_order._peel_tree(23) == SumTree.from_nested(
        ((((((((((((((((0, 1), 2), 3), (((4, 5), 6), 7)), 8), 9), 10), 11), (((12, 13), 14), 15)), 16), 17), 18), 19),
          20), 21), 22), fma=False)
    assert cpu_order._peel_tree(9) == SumTree.from_nested((((((0, 1), 2), 3), (((4, 5), 6), 7)), 8), fma=False)
    assert cpu_order._peel_tree(7) == SumTree.blocks([0, 7], fma=False)
    # FMA kernel: blocks of 192, the last two halved up to K = 384, a one-product block summed apart; +0 start
    assert MODEL.order(13, 385, 16).describe() == "fma [0:192] + [192:384] + [384:385]"
    assert MODEL.order(128, 208, 96).describe() == "fma [0:104] + [104:208]"
    # an odd K between 192 and 384: two halves of floor(K / 2), the last product apart (64x317x64, 64x193x64)
    assert MODEL.order(64, 317, 64).describe() == "fma [0:158] + [158:316] + [316:317]"
    assert MODEL.order(64, 193, 64).describe() == "fma [0:96] + [96:192] + [192:193]"
    assert MODEL.order(64, 191, 64).describe() == "fma [0:191]"
    assert MODEL.order(13, 1000, 16, 2).describe() == \
        "fma [0:192] + [192:384] + [384:576] + [576:768] + [768:960] + [960:1000]"
    assert MODEL.order(8, 1024, 8).describe() == "mul+add [0:1024]"      # the small kernel
    assert MODEL.order(4, 1, 4).trees[0].start == "product"      # an outer product: the products, -0 kept


def _grouped(M, K, N, threads=1, layout="NN"):
    o = MODEL.order(M, K, N, threads, layout)
    kinds = np.array(["F" if t.fma else ("P" if "then" in t.describe() else "m") for t in o.trees])
    return kinds[o.classes]


@pytest.mark.parametrize("M, N, peeled", [
    # the outputs the probe found summed apart at K = 64 on one thread (row: columns)
    (4, 5, {3: 1}),                       # rows 1 and 2 would leave fewer than 4 outputs after the boundary
    (4, 6, {1: 2, 3: 2}),
    (4, 7, {1: 1, 2: 2, 3: 3}),
    (8, 7, {1: 1, 2: 2, 3: 3, 5: 1, 6: 2, 7: 3}),
    (4, 9, {1: 3, 2: 2, 3: 1}),
    (3, 13, {1: 3, 2: 2}),
    (2, 5, {}),
    (4, 8, {}),
])
def test_the_outputs_summed_apart_are_those_revealed(M, N, peeled):
    want = np.full((M, N), "m")
    for r, n in peeled.items():
        want[r, :n] = "P"
    for layout in ("NN", "TN"):
        assert (_grouped(M, 64, N, layout=layout) == want).all()
    assert (_grouped(M, 64, N, layout="TT") == "m").all()      # both operands transposed: one chain each


@pytest.mark.parametrize("M, N, rows", [
    # two threads: the first takes 4 ceil(M / 8) rows; fewer than 4 left go to the small kernel (K = 64)
    (6, 431, {4: "m", 5: "Pm"}), (7, 431, {4: "m", 5: "Pm", 6: "PPm"}), (10, 431, {8: "m", 9: "Pm"}),
    (7, 20, {4: "m", 5: "m", 6: "m"}), (8, 20, {}), (12, 20, {}), (13, 431, {}), (5, 20, {4: "m"}),
])
def test_a_second_threads_last_rows_go_to_the_small_kernel(M, N, rows):
    g = _grouped(M, 64, N, threads=2)
    for r in range(M):
        want = rows.get(r, "F")
        assert "".join(g[r, :len(want)]) == want and (g[r, len(want):] == want[-1]).all(), (r, g[r, :4])
    assert (_grouped(M, 64, N, threads=1) == "F").all()


@pytest.mark.parametrize("stem, avx512", EPYCS)
def test_every_surveyed_gemm_is_in_the_models_order(stem, avx512):
    """All 154 GEMMs of the survey (77 shapes, 1 and 2 threads, NN), as revealed on each EPYC."""
    doc = json.loads((DATA / f"{stem}.json").read_text())
    assert doc["machine"]["vendor"] == "AuthenticAMD" and ("avx512f" in doc["machine"]["flags"]) == avx512
    rows = doc["gemms"]
    assert len(rows) == 154 and all(r["explained"] == 1.0 for r in rows)
    for r in rows:
        got = sorted(MODEL.order(r["M"], r["K"], r["N"], r["threads"]).describe().split("; "))
        assert got == sorted(r["order"].split("; ")), r


@pytest.mark.parametrize("stem, avx512", EPYCS)
def test_every_sum_starts_as_the_model_says_where_it_is_proven(stem, avx512):
    doc = json.loads((DATA / f"{stem}-starts.json").read_text())
    assert ("avx512f" in doc["machine"]["flags"]) == avx512
    assert doc["model"] == NAME and doc["machine"]["vendor"] == "AuthenticAMD"
    proven = [r for r in doc["gemms"] if MODEL.unproven(r["M"], r["K"], r["N"], r["threads"], r["layout"]) is None]
    assert [r["proven"] for r in doc["gemms"]] == [r in proven for r in doc["gemms"]]
    assert all(r["model_agrees"] == r["outputs"] for r in proven)
    assert {r["layout"] for r in proven} == set(cpu_order.LAYOUTS) and {r["threads"] for r in proven} == {1, 2}
    text = " ".join((ROOT / "docs/guides/torch.md").read_text().split())
    assert f"every output of the {len(proven)} GEMMs the model calls proven starts as it says" in text


@pytest.mark.parametrize("stem, avx512", EPYCS)
def test_the_model_holds_wherever_it_claims_on_random_shapes(stem, avx512):
    doc = json.loads((DATA / f"{stem}-random.json").read_text())
    assert ("avx512f" in doc["machine"]["flags"]) == avx512
    assert doc["model"] == NAME and doc["machine"]["vendor"] == "AuthenticAMD"
    rows = doc["gemms"]
    proven = [r for r in rows if MODEL.unproven(r["M"], r["K"], r["N"], r["threads"], r["layout"]) is None]
    assert [r["proven"] for r in rows] == [r in proven for r in rows]   # the file's verdicts are the model's
    assert not [r for r in proven if r["differ"]]
    assert {r["layout"] for r in proven} == set(cpu_order.LAYOUTS) and {r["threads"] for r in proven} == {1, 2}
    warned = [r for r in rows if r not in proven]
    text = " ".join((ROOT / "docs/guides/torch.md").read_text().split())
    assert (f"`mkl-2024.2-amd-avx2`: {len(proven)} of {len(rows)} random shapes are proven and none differs; "
            f"{sum(r['differ'] > 0 for r in warned)} of the {len(warned)} it warns about differ") in text


@pytest.mark.parametrize("shape, threads, layout, why", [
    ((9, 64, 1), 1, "NN", "gemv"),
    ((16, 5000, 16), 1, "NN", "K <= 4096"),
    ((16, 400, 16), 3, "NN", "1 and 2 thread"),
    ((7, 64, 20), None, "NN", "small kernel sums the last 3 row(s)"),
    ((4, 64, 6), 1, "NT", "SIMD lanes"),
    ((10, 64, 431), 2, "NT", "SIMD lanes"),
    ((64, 512, 1300), 2, "NN", "on two threads, M, N <= 1200 were measured"),
])
def test_it_says_where_it_was_not_proven(shape, threads, layout, why):
    assert why in MODEL.unproven(*shape, threads, layout)


@pytest.mark.parametrize("shape, threads, layout", [
    ((4, 64, 6), 1, "NN"), ((10, 64, 431), 2, "TN"), ((64, 4096, 64), 2, "NT"), ((7, 64, 20), 1, "NT"),
    ((3, 900, 17), 2, "TT"), ((64, 512, 64), None, "NN"),
    ((4, 1, 4), 2, "NT"), ((2, 1, 2), 1, "NT"),     # an outer product: no sum for the lanes to order (audit24 #10)
])
def test_it_is_proven_where_it_was_measured(shape, threads, layout):
    assert MODEL.unproven(*shape, threads, layout) is None


def test_auto_takes_this_cpus_model_without_torch(monkeypatch):
    _pretend(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        order, src = cpu_order.order_for(64, 512, 64, threads=1)
    assert src == NAME and order.describe() == "fma [0:192] + [192:384] + [384:512]"
    # an AMD EPYC with AVX-512 (Zen 4): MKL takes the same AVX2 kernels there (measured), no warning
    _pretend(monkeypatch, flags=("avx", "avx2", "fma", "avx512f", "avx512bw"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_order.order_for(64, 512, 64, threads=1)[1] == NAME
    # an AMD CPU without FMA is not where it was measured: the default model, with a warning
    _pretend(monkeypatch, flags=("avx", "avx2"))
    with pytest.warns(RuntimeWarning, match="is not the one mkl-2024.2-avx512 was proven on"):
        assert cpu_order.order_for(64, 512, 64, threads=1)[1] == "mkl-2024.2-avx512"
    # under MKL_CBWR=COMPATIBLE the reproducible branch, measured on this EPYC too: no warning
    _pretend(monkeypatch, mkl_env={"MKL_CBWR": "COMPATIBLE"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_order.order_for(16, 400, 9, threads=1)[1] == "mkl-2024.2-compatible"
    # the model pinned on an Intel CPU: no probing, the order as recorded
    _pretend(monkeypatch, vendor="GenuineIntel", flags=("avx2", "avx512f"))
    with cpu_order.use(NAME):
        assert cpu_order.order_for(4, 64, 6, threads=1, layout="TN")[1] == NAME
        with pytest.warns(RuntimeWarning, match="SIMD lanes over K"):
            assert cpu_order.order_for(4, 64, 6, threads=1, layout="NT")[1] == NAME


def test_the_zen4_epyc_took_the_same_kernels_as_the_avx2_one():
    """With AVX-512 on the CPU MKL 2024.2 still runs its AVX2 kernels on an AMD EPYC: the survey's orders, the
    starts and the random shapes' differences (the same seed) are those of the EPYC without AVX-512."""
    for suffix, key in (("", ("M", "K", "N", "threads", "explained", "order")),
                        ("-starts", ("M", "K", "N", "threads", "layout", "explained", "starts", "fma", "model_agrees")),
                        ("-random", ("M", "K", "N", "threads", "layout", "outputs", "differ"))):
        old, zen4 = (json.loads((DATA / f"{stem}{suffix}.json").read_text()) for stem, _ in EPYCS)
        assert "avx512f" not in old["machine"]["flags"] and "avx512f" in zen4["machine"]["flags"]
        assert len(old["gemms"]) == len(zen4["gemms"]) > 100
        assert [[r[k] for k in key] for r in old["gemms"]] == [[r[k] for k in key] for r in zen4["gemms"]], suffix


@pytest.mark.parametrize("stem", [stem for stem, _ in EPYCS])
def test_the_compatible_branch_gave_the_same_bits_on_the_epyc_as_on_the_xeon(stem):
    """MKL_CBWR=COMPATIBLE: the same 300 random products (seed 1) differ from the model in the same number of
    outputs, shape by shape, on each EPYC as on the Xeon (0 wherever the model calls the shape proven); the
    surveys reveal the same orders and the same starts."""
    for suffix, key in (("-random", ("M", "K", "N", "threads", "layout", "differ")), ("", ("M", "K", "N", "order")),
                        ("-starts", ("M", "K", "N", "threads", "layout", "starts", "model_agrees"))):
        amd = json.loads((DATA / f"{stem}-compatible{suffix}.json").read_text())
        intel = json.loads((DATA / f"xeon-amx-mkl-2024.2-compatible{suffix}.json").read_text())
        assert amd["machine"]["vendor"] == "AuthenticAMD" and intel["machine"]["vendor"] == "GenuineIntel"
        assert amd["machine"]["mkl_env"] == intel["machine"]["mkl_env"] == {"MKL_CBWR": "COMPATIBLE"}
        assert len(amd["gemms"]) == len(intel["gemms"]) > 100
        assert [[r[k] for k in key] for r in amd["gemms"]] == [[r[k] for k in key] for r in intel["gemms"]], suffix


def test_live_torch_equals_the_model_on_its_cpu_or_it_warns():
    """On every CPU with torch: where this is the model's CPU, torch.mm equals it wherever it claims; on any
    other CPU every product warns (never a silent difference)."""
    torch = pytest.importorskip("torch")
    from fp8emu.gemm import torch_cpu
    rng = np.random.default_rng(7)
    old = torch.get_num_threads()
    rows = []
    try:
        for M, K, N, t, layout in [(4, 300, 6, 1, "NN"), (10, 700, 431, 2, "NN"), (3, 900, 17, 2, "TN"),
                                   (64, 1000, 64, 2, "NT"), (20, 385, 20, 1, "TT"), (7, 64, 20, 2, "NT"),
                                   (33, 2000, 40, 1, "TN"), (2, 50, 9, 1, "NT"), (16, 317, 24, 2, "NN")]:
            a = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-12, 13, (M, K)))).astype(np.float32)
            b = rng.standard_normal((K, N)).astype(np.float32)
            torch.set_num_threads(t)
            ta = torch.from_numpy(a) if layout[0] == "N" else torch.from_numpy(np.ascontiguousarray(a.T)).t()
            tb = torch.from_numpy(b) if layout[1] == "N" else torch.from_numpy(np.ascontiguousarray(b.T)).t()
            want = torch.mm(ta, tb).numpy()
            with cpu_order.use(NAME), warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                got = torch_cpu.sgemm(a, b, threads=t, layout=layout)
            rows.append((M, K, N, t, layout, int((got.view(np.int32) != want.view(np.int32)).sum()), len(w)))
    finally:
        torch.set_num_threads(old)
    assert not [r for r in rows if r[5] and not r[6]], rows        # never a silent difference
    if MODEL.applies_here(cpu_order.machine()):
        proven = [r for r in rows if not r[6]]
        assert len(proven) >= 6 and {r[4] for r in proven} == set(cpu_order.LAYOUTS), rows
        assert [r for r in rows if r[6] and r[4] == "NT"]            # the small kernel with B transposed warns
    else:
        assert all(r[6] for r in rows), rows


@pytest.mark.parametrize("K", [-5, 2.5, True, "300"])
def test_the_blocks_take_a_count_of_products_only(K):
    # an odd K between kc and 2 kc is read before the other rules: -5 or 2.5 must not reach it unchecked
    with pytest.raises(ValueError, match="M, K, N must be non-negative integers"):
        MODEL.blocks(K, 64, 64)
