"""fp8emu's tensor-core accumulators against third-party GPU recordings (Khattak & Mikaitis).

The data (tests/data/tc_recordings, see its README) are 5000 K=32 FP8 dot products per
file recorded with ``mma.sync ... m16n8k32 ... .f32`` on an H200 and a B200 by another
group; the expected values are the GPU's float32 results, nothing computed here.
"""

from pathlib import Path

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import GemmModel, Policy, block_scaled_mm, step_row


def _model(group=32, frac_bits=31, sum_bits=24, sum_rounding="rne", scale_at="product"):
    """A block-scaled model of these step widths: a catalogue row and where the scales apply."""
    return GemmModel("widths", "instruction", step_row(group, frac_bits, sum_bits, sum_rounding), Policy(scale_at=scale_at))

DATA = Path(__file__).parent / "data" / "tc_recordings"
FORMATS = {"e4m3": "e4m3fn", "e5m2": "e5m2"}
E8M0_ONE = 127      # the E8M0 code of 2**0: MX scales that leave the products as they are


def load(gpu, fmt):
    z = np.load(DATA / f"{gpu}_{fmt}.npz")
    return z["a"], z["b"], z["c_bits"].view(np.float32), z["d_bits"]


def rowwise(fn, a, b, chunk=250):
    """Row i of ``a`` dotted with row i of ``b``: the diagonals of chunked (chunk x chunk) GEMMs."""
    out = np.empty(len(a), np.float32)
    for i in range(0, len(a), chunk):
        s = slice(i, i + chunk)
        out[s] = np.diagonal(fn(a[s], np.ascontiguousarray(b[s].T), s))
    return out


def mismatches(got, d_bits):
    return np.flatnonzero(got.view(np.uint32) != d_bits).tolist()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_hopper_accumulator_matches_third_party_h200_recordings(fmt):
    a, b, _, d = load("h200", fmt)
    f = FORMATS[fmt]
    got = rowwise(lambda x, y, s: fp8emu.scaled_mm(x, y, a_format=f, b_format=f, accumulator="hopper"), a, b)
    assert mismatches(got, d) == []
    # the data tell accumulators apart: an exact sum misses thousands of these rows
    exact = rowwise(lambda x, y, s: fp8emu.scaled_mm(x, y, a_format=f, b_format=f, accumulator="exact"), a, b)
    assert len(mismatches(exact, d)) > 500


def _b200(fmt, accumulator):
    a, b, c, d = load("b200", fmt)
    f = FORMATS[fmt]
    ones = np.full((len(a), 1), E8M0_ONE, np.uint8)

    def mm(x, y, s):
        n = x.shape[0]
        # row i's C sits on the diagonal; the other entries of the chunk are not read
        cc = np.broadcast_to(c[s][:, None], (n, y.shape[1]))
        return block_scaled_mm(x, y, a_format=f, b_format=f, a_scales=ones[s], b_scales=ones[s].T,
                               accumulator=accumulator, c=cc)
    return rowwise(mm, a, b), d


# Row 3935 of the E5M2 file is the one recording no width reproduces: the GPU returned
# -0x1.1bbef8p+3, the nearest float32 to the exact sum is -0x1.1bbefap+3.
KNOWN = {"e4m3": [], "e5m2": [3935]}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_blackwell_preset_matches_b200_recordings(fmt):
    got, d = _b200(fmt, "blackwell")
    assert mismatches(got, d) == KNOWN[fmt]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_b200_recordings_reject_truncating_and_narrow_accumulators(fmt):
    # The published B200 model's widths (25 fraction bits, result truncated to float32)
    # and the earlier placeholder (25 bits, 25-bit truncated steps) both miss hundreds of rows:
    # the data pin the preset down rather than merely failing to contradict it.
    for acc in (_model(32, 25, 24, "rtz"), _model(32, 25, 25, "rtz"),
                _model(32, 25, 24, "rne")):
        got, d = _b200(fmt, acc)
        assert len(mismatches(got, d)) > 100, acc


def test_b200_recordings_bound_the_alignment_width():
    # 31 fraction bits is the narrowest alignment that reproduces every E5M2 row (but 3935):
    # one bit fewer loses two more rows, so the preset's width is the data's lower bound
    got, d = _b200("e5m2", _model(32, 30, 24, "rne"))
    assert mismatches(got, d) == [3935, 4630]


def test_b200_recordings_and_the_exact_accumulator():
    # the exact sum of products and C, rounded once, is what the B200 returned (but row 3935)
    for fmt in FORMATS:
        got, d = _b200(fmt, "exact")
        assert mismatches(got, d) == KNOWN[fmt]
