"""The conformance report: exact interval arithmetic over run-length tables."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import fp8emu
from fp8emu.data import golden_dir
from fp8emu import conformance as C
from fp8emu.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = golden_dir()


@pytest.fixture(scope="module")
def rows():
    return {r["table"]: r for r in C.report(str(GOLDEN))}


def test_every_table_reproduced(rows):
    assert len(rows) == 75
    assert all(r["mismatches"] == 0 for r in rows.values())
    for r in rows.values():
        split = sum(r[f"ocp_{k}"] for k in C.KINDS)
        assert split == r["differs_from_ocp"] <= r["inputs"]


def _bits(v):
    return int(np.array(v, np.float32).view(np.uint32))


def test_counts_derived_by_hand(rows):
    nan_per_sign = 2**23 - 1             # float32 NaN patterns of one sign
    # CUDA's NaN is 0x7F: only negative NaNs differ from the spec's signed 0xFF
    assert rows["cuda_f32_e4m3_nosat"]["ocp_nan"] == nan_per_sign
    assert rows["cuda_f32_e4m3_nosat"]["differs_from_ocp"] == nan_per_sign
    # E5M2 NaN 0x7F vs the spec's 0x7E/0xFE: every NaN differs
    assert rows["cuda_f32_e5m2_nosat"]["ocp_nan"] == 2 * nan_per_sign
    assert rows["torch_f32_e5m2"]["ocp_nan"] == 2 * nan_per_sign
    # satfinite: every |x| > 464 (the tie 464 goes to 448, even), Inf included, saturates
    over = _bits(np.inf) - _bits(464.0)
    assert rows["cuda_f32_e4m3_satfinite"]["ocp_saturation"] == 2 * over
    assert rows["triton_f32_e4m3fn_rtne"]["ocp_saturation"] == 2 * over
    # E5M2: max 57344, next would be 65536; the tie 61440 rounds to even 65536 = overflow
    # (the spec gives Inf there, satfinite max): [61440, Inf] per sign
    assert rows["cuda_f32_e5m2_satfinite"]["ocp_saturation"] == 2 * (_bits(np.inf) - _bits(61440.0) + 1)
    # the spec-exact paths
    for name in ("torch_f32_e4m3fn", "torch_f32_e4m3fnuz", "jax_f32_e5m2fnuz", "cuda_f32_e2m1_rn"):
        assert rows[name]["differs_from_ocp"] == 0


def test_interval_arithmetic_matches_brute_force_on_16_bit_tables(rows):
    for name, fmt, src in [("cuda_f16_e5m2_satfinite", "e5m2", np.float16),
                           ("torch_f16_to_e8m0fnu", "e8m0fnu", np.float16)]:
        x = np.arange(1 << 16, dtype=np.uint16).view(src)
        t = {r.name: r for r in C.recorded_tables(str(GOLDEN))}[name]
        if t.kind == "cast":
            s, c, _ = C.read_rle(t.path)
            rec = C.rle_at(s, c, np.arange(1 << 16, dtype=np.uint64))
        else:
            rec = np.load(t.path)[t.key]
        assert rows[name]["differs_from_ocp"] == int(np.count_nonzero(rec != fp8emu.encode(x, fmt)))


def test_profile_runs_are_the_cast():
    s, c = C.profile_runs("cuda-nosat", "e8m0fnu", "float32", "rup")
    rng = np.random.default_rng(0)
    p = rng.integers(0, 2**32, 100000, dtype=np.uint64)
    x = p.astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(C.rle_at(s, c, p),
                                  fp8emu.encode(x, "e8m0fnu", profile="cuda-nosat", rounding="rup"))


def test_read_rle_rejects_garbage(tmp_path):
    p = tmp_path / "bad.rle"
    p.write_text("# x\n10 1\n5 2\n")
    with pytest.raises(ValueError, match="run-length"):
        C.read_rle(p)


def test_docs_conformance_page_has_the_generated_table():
    # docs/reference/conformance.md includes the table the docs build generates from the code.
    import sys
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import fp8emu_docs
    text = (ROOT / "docs" / "reference" / "conformance.md").read_text()
    assert "# Conformance" in text and "```{include} ../_generated/conformance.md\n```" in text
    table = fp8emu_docs.TABLES["conformance.md"]()
    assert table == C.markdown_table()
    assert len(table.splitlines()) == 2 + 75 and "| `torch_f32_e4m3fn` | torch-cuda-2.11 | 2^32 | 0 |" in table


def test_cli_conformance(capsys):
    assert main(["conformance"]) == 0
    out = capsys.readouterr().out
    assert "all 75 recorded tables reproduced" in out and "`torch_f32_e8m0fnu`" in out
