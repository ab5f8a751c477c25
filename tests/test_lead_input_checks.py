"""Inputs the fourth audit was told were known: the order cache's file kind and size, a black box's
answer type in ``reveal``, ``emulate`` on a model with no ``nn.Linear``, and a study CSV's header."""

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.order_probe import reveal
from fp8emu.lab.lm_study import read_study_csv


# ---- the order cache: a path that is not a regular file, or a file past the limit ------------------

@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_order, "_REFUSED", set())
    return tmp_path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_at_the_cache_path_is_neither_read_nor_replaced(cache_dir):
    p = cpu_order.cache_path()
    os.mkfifo(p)
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert cpu_order._load_cache() == {}            # returns at once: before the fix the read blocked
    cpu_order._store("k", {"order": None})
    assert not p.is_file() and p.exists()                # still the FIFO: not replaced by a file


def test_a_directory_at_the_cache_path_warns_once(cache_dir):
    p = cpu_order.cache_path()
    p.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cpu_order._load_cache() == {}
        assert cpu_order._load_cache() == {}
    assert [str(w.message).count("not a regular file") for w in caught] == [1]


def test_a_cache_file_past_the_limit_is_not_read_or_grown(cache_dir, monkeypatch):
    monkeypatch.setattr(cpu_order, "CACHE_LIMIT", 64)
    p = cpu_order.cache_path()
    p.write_text('{"a": ' + " " * 100 + '1}')
    with pytest.warns(RuntimeWarning, match="past the 64-byte limit"):
        assert cpu_order._load_cache() == {}
    size = p.stat().st_size
    cpu_order._store("k", {"x": 1})
    assert p.stat().st_size == size


def test_a_refused_cache_file_leaves_no_descriptor_open(cache_dir, monkeypatch):
    # (mutation sample seed 82, [367]: without its os.close the refused file's descriptor stayed open, one per
    # process-wide refusal; counted in /proc/self/fd, where Linux lists a process's open descriptors)
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("counts open descriptors in Linux's /proc/self/fd")
    monkeypatch.setattr(cpu_order, "CACHE_LIMIT", 64)
    cpu_order.cache_path().write_text('{"a": ' + " " * 100 + '1}')
    before = len(list(fds.iterdir()))
    with pytest.warns(RuntimeWarning, match="past the 64-byte limit"):
        cpu_order._load_cache()
    assert len(list(fds.iterdir())) == before


def test_order_fors_warning_names_its_callers_line(monkeypatch):
    # (mutation sample seed 82, [474]: its default stacklevel 3 named the caller's caller, here pytest's own file)
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    with pytest.warns(RuntimeWarning) as caught:
        cpu_order.order_for(1, 64, 8, threads=1)                  # a single row: gemv, outside the proven shapes
    assert [w.filename for w in caught] == [__file__]


def test_a_regular_cache_file_still_round_trips(cache_dir):
    cpu_order._store("k", {"x": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_order._load_cache() == {"k": {"x": 1}}


# ---- reveal: what the black box answers ------------------------------------------------------------

def _mm(kind):
    def mm(a, b):
        r = a @ b
        if kind == "complex":
            return r.astype(np.complex64) + 1j
        if kind == "str":
            return r.astype(str)
        if kind == "float64-wide":
            return a.astype(np.float64) @ b.astype(np.float64)
        return r.astype(np.float64)                      # float32 sums held in float64: accepted
    return mm


@pytest.mark.parametrize("kind, err, match", [("complex", TypeError, "complex64"), ("str", TypeError, "<U"),
                                              ("float64-wide", ValueError, "not float32 values")])
def test_reveal_refuses_answers_that_are_not_float32_values(kind, err, match):
    with pytest.raises(err, match=match):
        reveal(_mm(kind), 2, 8, 2)


def test_reveal_accepts_float32_values_in_a_wider_type():
    order, facts = reveal(_mm("float64-held"), 2, 8, 2)
    assert facts["explained"] == 1.0
    order32, _ = reveal(lambda a, b: a @ b, 2, 8, 2)
    assert order.to_json() == order32.to_json()


# ---- emulate on a model with no nn.Linear ------------------------------------------------------------

def test_emulate_warns_when_the_model_holds_no_linear_layer():
    torch = pytest.importorskip("torch")
    from fp8emu.torch import emulate
    from fp8emu.torch.swap import HighPrecisionWarning
    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.LayerNorm(4))
    with pytest.warns(HighPrecisionWarning, match="holds no nn.Linear layer"):
        report = emulate(model, "te-current", "h100")
    assert report.swapped == {}


# ---- study CSVs --------------------------------------------------------------------------------------

def _csv(tmp_path, text):
    f = tmp_path / "runs.csv"
    f.write_text(text)
    return f


def test_a_column_named_twice_is_refused(tmp_path):
    f = _csv(tmp_path, "recipe,loss,loss\nbf16,1.0,2.0\n")
    with pytest.raises(ValueError, match=r"runs.csv: the header names column 'loss' more than once"):
        read_study_csv(f)


def test_a_row_with_more_or_fewer_fields_names_its_line(tmp_path):
    with pytest.raises(ValueError, match=r"runs.csv, line 3: 3 fields where the header names 2"):
        read_study_csv(_csv(tmp_path, "recipe,loss\nbf16,1.0\nfp8,1.0,9\n"))
    with pytest.raises(ValueError, match=r"line 2: 1 fields where the header names 2"):
        read_study_csv(_csv(tmp_path, "recipe,loss\nbf16\n"))


def test_text_in_a_number_column_names_column_and_line(tmp_path):
    with pytest.raises(ValueError, match=r"line 2: column 'loss' holds 'abc', which is not a number"):
        read_study_csv(_csv(tmp_path, "recipe,loss\nbf16,abc\n"))


def test_values_blank_lines_and_an_empty_file(tmp_path):
    rows = read_study_csv(_csv(tmp_path, "recipe,seed,loss\n\nbf16,3,1.25\nfp8,4,\n"))
    assert rows[0] == {"recipe": "bf16", "seed": 3, "loss": 1.25}
    assert rows[1]["seed"] == 4 and np.isnan(rows[1]["loss"])
    assert read_study_csv(_csv(tmp_path, "")) == []
