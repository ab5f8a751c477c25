"""Every file reader survives hostile input.

Corrupted, truncated, lying and hostile files (written with the real safetensors package and NumPy,
then damaged) give one ValueError naming the file, never another exception type, never a hang, and
never an allocation sized by a header's claims.  test_fuzz_readers.py drives the same readers with
a seeded corpus of byte mutations.
"""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
import zipfile

import ml_dtypes
import numpy as np
import pytest
from safetensors import numpy as st_numpy

import fp8emu
from fp8emu import conformance, readers
from fp8emu.cli import main
from fp8emu.lab import study
from fp8emu.testing import load_golden

F32 = np.float32
pytest_plugins = ["pytester"]


def _st_file(path, header, data=b""):
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    return path


def _good_st(tmp_path):
    p = tmp_path / "good.safetensors"
    st_numpy.save_file({"w": np.arange(12, dtype=F32).reshape(3, 4)}, str(p))
    return p


# The eight corrupted variants of the issue, plus a header claiming 2**60 elements in 600 bytes.
W = {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}
VARIANTS = {
    "truncated data": ({"w": W}, bytes(20), "data_offsets"),
    "header a JSON list": ([1, 2], b"", "not an object"),
    "entry not an object": ({"w": [1, 2]}, bytes(48), "must be an object"),
    "missing shape": ({"w": {"dtype": "F32", "data_offsets": [0, 48]}}, bytes(48), "no 'shape'"),
    "string shape": ({"w": dict(W, shape="3x4")}, bytes(48), "shape must be a list"),
    "offsets not covering the shape": ({"w": dict(W, data_offsets=[0, 40])}, bytes(48), "needs 48 bytes"),
    "negative dimension": ({"w": dict(W, shape=[-3, -4])}, bytes(48), "negative dimension"),
    "dtype float32": ({"w": dict(W, dtype="float32")}, bytes(48), "unknown dtype 'float32'"),
    "huge claim": ({"w": {"dtype": "F32", "shape": [2 ** 40, 2 ** 20], "data_offsets": [0, 48]},
                    "__metadata__": {"pad": "x" * 400}}, bytes(48), "needs"),
    "offsets beyond file": ({"w": dict(W, data_offsets=[2 ** 62, 2 ** 62 + 48])}, bytes(48), "outside"),
    "bool shape": ({"w": dict(W, shape=[True, 4])}, bytes(48), "non-negative integers"),
    "overlap": ({"w": W, "v": W}, bytes(48), "overlap"),
    "metadata not strings": ({"w": W, "__metadata__": {"a": 1}}, bytes(48), "__metadata__"),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_corrupted_safetensors_is_one_value_error(tmp_path, capsys, name):
    header, data, needle = VARIANTS[name]
    p = _st_file(tmp_path / "bad.safetensors", header, data)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=needle) as exc:
            refs, _ = study.discover([p])
            for r in refs:
                for a, b in study.chunk_ranges(r, 1 << 20):
                    r.read(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(p) in str(exc.value)
    assert time.perf_counter() - t0 < 2 and peak < 8 << 20
    rc = main(["study", str(p), "--out", str(tmp_path / "out"), "--quiet", "--no-report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("fp8emu study: error:") and str(p) in err[0]


def test_header_length_beyond_file_and_short_files(tmp_path):
    for raw, needle in [(b"", "shorter"), (b"\x01\x02", "shorter"), (struct.pack("<Q", 10 ** 9) + b"{}", "header length"),
                        (struct.pack("<Q", 2) + b"\xff\xfe", "UTF-8"), (struct.pack("<Q", 3) + b"{x}", "invalid JSON")]:
        p = tmp_path / "x.safetensors"
        p.write_bytes(raw)
        with pytest.raises(ValueError, match=needle):
            readers.safetensors_header(p)


def test_file_changed_after_discovery_is_an_error(tmp_path):
    p = _good_st(tmp_path)
    ref = study.discover([p])[0][0]
    assert ref.read().tolist() == np.arange(12.0).reshape(3, 4).tolist()
    p.write_bytes(p.read_bytes()[:-8])
    with pytest.raises(ValueError, match=str(p)):
        ref.read()


def test_empty_tensors_with_huge_dimensions_are_one_chunk(tmp_path):
    p = _st_file(tmp_path / "e.safetensors", {"e": {"dtype": "F32", "shape": [2 ** 60, 0], "data_offsets": [0, 0]}})
    ref = study.discover([p])[0][0]
    t0 = time.perf_counter()
    assert study.chunk_ranges(ref, 1024) == [(None, None)]
    assert ref.read().shape == (2 ** 60, 0) and time.perf_counter() - t0 < 1


# ----------------------------------------------------------------------------- .npy / .npz folders
def _npy_with_header(path, header_dict, data=b""):
    text = repr(header_dict).encode("latin1")
    text += b" " * ((64 - (len(text) + 11) % 64) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data)
    return path


@pytest.mark.parametrize("header,needle", [
    ({"descr": "<f4", "fortran_order": False, "shape": (2 ** 40, 2 ** 20)}, "needs"),
    ({"descr": "<f4", "fortran_order": False, "shape": (-1, 4)}, "negative"),
    ({"descr": "|O", "fortran_order": False, "shape": (1,)}, "objects"),
    ({"descr": "<f4", "fortran_order": "no", "shape": (1,)}, "fortran_order"),
    ({"descr": "<f4", "shape": (1,)}, "keys"),
    ({"descr": "nonsense", "fortran_order": False, "shape": (1,)}, "dtype"),
])
def test_lying_npy_in_a_folder(tmp_path, header, needle):
    d = tmp_path / "ckpt"
    d.mkdir()
    np.save(d / "ok.npy", np.ones((2, 2), F32))
    _npy_with_header(d / "bad.npy", header, bytes(16))
    with pytest.raises(ValueError, match=needle) as exc:
        study.discover([d])
    assert "bad.npy" in str(exc.value)


def test_npz_with_bad_crc_and_lying_member(tmp_path):
    p = tmp_path / "g.npz"
    fp8emu.save_golden(p, "e4m3fn")
    raw = bytearray(p.read_bytes())
    i = raw.find(b"\x93NUMPY", raw.find(b"codes.npy"))
    raw[i + 200] ^= 0xFF                                         # data byte of the codes member
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupted.*CRC|Bad CRC") as exc:
        load_golden(p)
    assert str(p) in str(exc.value)
    # a member whose header claims more elements than it stores
    q = tmp_path / "lie.npz"
    with zipfile.ZipFile(q, "w") as z:
        hdr = tmp_path / "h.npy"
        _npy_with_header(hdr, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 40,)}, bytes(8))
        z.write(hdr, "x.npy")
    with pytest.raises(ValueError, match="needs"):
        readers.read_npz(q)
    with pytest.raises(ValueError, match="needs"):
        study.discover([q])


# ----------------------------------------------------------------------------- golden files
def test_deeply_nested_json_golden(tmp_path):
    p = tmp_path / "g.json"
    p.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply") as exc:
        load_golden(p)
    assert str(p) in str(exc.value)


@pytest.mark.parametrize("key,value,needle", [
    ("saturate", "no", "saturate must be true or false"),
    ("saturate", 1, "saturate must be true or false"),
    ("rounding", "rnd", "unknown rounding 'rnd'"),
    ("profile", "cuda-fast", "unknown profile 'cuda-fast'"),
    ("format", "e9m9", "unknown format"),
    ("source_dtype", "float8", "unknown source_dtype"),
    ("format_version", 1.5, "format_version must be an integer"),
    ("format_version", True, "format_version must be an integer"),
    ("sr_bits", 7, "sr_bits must be 0"),
    ("seed", 3, "seed must be -1"),
    ("random_bits", ["0x1"], "random_bits apply only"),
])
def test_golden_options_are_validated_like_arguments(tmp_path, key, value, needle):
    p = tmp_path / "g.json"
    fp8emu.save_golden(p, "e4m3fn")
    d = json.loads(p.read_text())
    d[key] = value
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=needle):
        load_golden(p)


def test_golden_npz_options_are_validated(tmp_path):
    p = tmp_path / "g.npz"
    fp8emu.save_golden(p, "e4m3fn")
    arrays = readers.read_npz(p)
    for key, value, needle in [("saturate", np.array("no"), "saturate"), ("rounding", np.array("x"), "rounding"),
                               ("bits", np.array(3, np.uint32), "array")]:
        bad = dict(arrays, **{key: value})
        q = tmp_path / "bad.npz"
        with open(q, "wb") as fh:
            np.savez(fh, **bad)
        with pytest.raises(ValueError, match=needle):
            load_golden(q)


def test_recorded_table_readers(tmp_path):
    for text, needle in [("# x inputs=65536\n0 0\nzz 1\n", "line 3"), ("# x inputs=7\n0 0\n", "inputs=7"),
                         ("# x inputs=65536\n0 0\n10000 1\n", "beyond"), ("0 0\n-5 1\n", "line 2"),
                         ("0 0\n1 " + "f" * 40 + "\n", "line 2"), ("\0\0", "NUL")]:
        p = tmp_path / "t.rle"
        p.write_text(text)
        with pytest.raises(ValueError, match=needle) as exc:
            conformance.read_rle(p)
        assert str(p) in str(exc.value)


# ----------------------------------------------------------------------------- fp8_golden snapshots
def test_fp8_golden_fixture_fails_clearly_on_a_corrupted_snapshot(pytester):
    pytester.makepyfile(test_snap="""
        import numpy as np, fp8emu
        X = np.linspace(-3, 3, 24, dtype=np.float32)
        def test_kernel(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e4m3fn"), x=X, fmt="e4m3fn")
    """)
    pytester.runpytest("-p", "fp8emu.testing.plugin").assert_outcomes(passed=1)
    snap = pytester.path / "fp8_golden" / "test_snap" / "test_kernel.npz"
    raw = bytearray(snap.read_bytes())
    raw[len(raw) // 3] ^= 0x55
    snap.write_bytes(bytes(raw))
    r = pytester.runpytest("-p", "fp8emu.testing.plugin")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fp8_golden: the snapshot cannot be used:*test_kernel.npz*"])
    assert "Traceback" not in r.stdout.str() and "During handling" not in r.stdout.str()


# ----------------------------------------------------------------------------- results.csv
def test_hostile_results_csv_is_refused(tmp_path):
    p = tmp_path / "w.npy"
    np.save(p, np.linspace(-1, 1, 64, dtype=F32))
    out = tmp_path / "out"
    study.run_study([p], out, recipes=["tensor-e4m3fn"], progress=False, report=False)
    csv_path = out / "results.csv"
    good = csv_path.read_text()
    for bad, needle in [(good + "a,b,c\n", "line 3: 3 fields"), (good.replace("\n", "\n\0", 1), "NUL"),
                        (good + '"' + "x" * 200_000 + '"\n', "line 3"), ("x,y\n", "not a results.csv")]:
        csv_path.write_text(bad)
        with pytest.raises(ValueError, match=needle) as exc:
            study.read_results(csv_path)
        assert str(csv_path) in str(exc.value)
    csv_path.write_text(good + good.splitlines()[1][:30])          # torn last line: dropped
    assert len(study.read_results(csv_path)) == 1


@pytest.mark.parametrize("edit,needle", [
    (lambda h: h.replace("saturate=False", "saturate=no"), "saturate must be True or False"),
    (lambda h: h.replace("rounding=rne", "rounding=fast"), "unknown rounding 'fast'"),
    (lambda h: h.replace("profile=ocp", "profile=cuda-fast"), "unknown profile"),
    (lambda h: h.replace("source=float16", "source=float64"), "float32, float16 or bfloat16"),
    (lambda h: h.replace("format_version=1", "format_version=9"), "format_version 9"),
    (lambda h: h.replace(" format=e4m3fn", ""), "lacks format="),
    (lambda h: h.replace("inputs=65536", "inputs=4294967296"), "covers 65536"),
])
def test_golden_rle_options_are_validated(tmp_path, edit, needle):
    from fp8emu.testing.golden import save_rle
    p = tmp_path / "t.rle"
    save_rle(p, "e4m3fn", source_dtype="float16")
    head, body = p.read_text().split("\n", 1)
    p.write_text(edit(head) + "\n" + body)
    with pytest.raises(ValueError, match=needle):
        load_golden(p)


def test_recorded_npz_tables_with_wrong_keys_or_shapes(tmp_path, capsys):
    for arrays, needle in [({"e9m9_to_f16": np.zeros(512, np.uint16)}, "not a recorded table key"),
                           ({"e4m3fn_to_f99": np.zeros(256, np.uint16)}, "decode type"),
                           ({"e4m3fn_to_f16": np.zeros(3, np.uint16)}, "expected (256,)"),
                           ({"f16_to_e4m3fn": np.zeros((), np.uint8)}, "expected (65536,)")]:
        d = tmp_path / f"t{len(needle)}"
        d.mkdir()
        np.savez(d / "torch_tables.npz", **arrays)
        assert main(["conformance", "--folder", str(d)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0] and "torch_tables.npz" in err[0], err


def test_scaled_mm_case_operands_are_not_wrapped():
    from fp8emu.testing import scaled_mm_cases
    a = np.full((2, 4), 300, np.uint16)                        # 300 would wrap to uint8 44
    with pytest.raises(ValueError, match="out of range"):
        scaled_mm_cases(operands=[(a, np.zeros((4, 2), np.uint8))], accumulators=["fp32"])
    with pytest.raises(TypeError, match="unsigned integers"):  # a signed array: -1 would wrap to 255
        scaled_mm_cases(operands=[(a.astype(np.int32), np.zeros((4, 2), np.uint8))], accumulators=["fp32"])
    with pytest.raises(TypeError):
        scaled_mm_cases(operands=[(a.astype(np.float32) + 0.5, np.zeros((4, 2), np.uint8))], accumulators=["fp32"])


# ----------------------------------------------------------- shapes, failing tensors, empty selections, ml_dtypes casts
def test_a_tensor_with_a_zero_last_dimension_is_studied(tmp_path):
    """An F32 [5, 0] tensor aborted the whole study with NumPy's "cannot reshape array of size 0 into
    shape (0)" (reshape(-1, 0) in as_matrix and in the TE NVFP4 recipe), naming neither file nor tensor."""
    p = _st_file(tmp_path / "z.safetensors",
                 {"b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "w": {"dtype": "F32", "shape": [5, 0], "data_offsets": [8, 8]}}, F32([1, 2]).tobytes())
    res = study.run_study([p], tmp_path / "out", recipes=["all"], progress=False, report=False)
    rows = [r for r in res["rows"] if r["tensor"] == "w"]
    assert len(rows) == len(fp8emu.lab.recipes.select_recipes(["all"])) and all(r["shape"] == "5x0" for r in rows)
    # The report of such a tensor, with a recipe of each family (the report of all 161 recipes, 10 s of
    # drawing, is test_study_checkpoints' test_all_recipes_render_without_matplotlib_warnings).
    few = ["cast-e4m3fn-ocp", "tensor-e4m3fn", "row-e4m3fn", "mx-e2m1fn-floor", "nvfp4", "nvfp4-4over6-te"]
    study.run_study([p], tmp_path / "few", recipes=few, progress=False)
    assert (tmp_path / "few" / "report.html").is_file() and " w " in (tmp_path / "few" / "report.md").read_text()


@pytest.mark.parametrize("kind", ["safetensors", "npz", "npy"])
def test_a_shape_numpy_cannot_hold_names_the_file(tmp_path, kind):
    """(2**62, 0) holds no data, but NumPy refuses the shape (its non-zero dimensions times 4 bytes pass
    2**63): the reader raised NumPy's message without the file's path."""
    shape = [2 ** 62, 0]
    if kind == "safetensors":
        p = _st_file(tmp_path / "w.safetensors", {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}})
    elif kind == "npy":
        p = _npy_with_header(tmp_path / "w.npy", {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)})
    else:
        m = _npy_with_header(tmp_path / "m.npy", {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)})
        p = tmp_path / "w.npz"
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("w.npy", m.read_bytes())
    with pytest.raises(ValueError, match=rf"{p.name}.*too large for a NumPy array"):
        study.run_study([p], tmp_path / "out", progress=False)
    with pytest.raises(ValueError, match=p.name):
        if kind == "safetensors":
            readers.safetensors_header(p)
        elif kind == "npy":
            readers.read_npy(p)
        else:
            readers.read_npz(p)


def test_a_failing_tensor_is_named_with_its_checkpoint(tmp_path, monkeypatch):
    """Any error inside one tensor's passes names the checkpoint and the tensor."""
    p = _good_st(tmp_path)

    def boom(*a):
        raise ValueError("inner failure")
    monkeypatch.setattr(study, "stage_stats", boom)
    with pytest.raises(ValueError, match=r"good\.safetensors: tensor 'w' \[3, 4\]: ValueError: inner failure"):
        study.run_study([p], tmp_path / "out", progress=False)


@pytest.mark.parametrize("recipes", [[""], ["", ","], [" , "]])
def test_an_empty_recipe_selection_is_refused(tmp_path, capsys, recipes):
    """`--recipes ''` exited 0 with an empty results.csv."""
    p = _good_st(tmp_path)
    argv = ["study", str(p), "--out", str(tmp_path / "out"), "--quiet"]
    for r in recipes:
        argv += ["--recipes", r]
    assert main(argv) == 2
    assert "names no recipe" in capsys.readouterr().err and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="no recipe named"):
        fp8emu.lab.recipes.select_recipes([])
    with pytest.raises(ValueError, match="no recipe named"):
        study.run_study([p], tmp_path / "out2", recipes="", progress=False)


_ML = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz",
       "e4m3b11fnuz": "float8_e4m3b11fnuz", "e4m3": "float8_e4m3", "e3m4": "float8_e3m4", "e8m0fnu": "float8_e8m0fnu",
       "e2m3fn": "float6_e2m3fn", "e3m2fn": "float6_e3m2fn", "e2m1fn": "float4_e2m1fn"}


@pytest.mark.parametrize("src", list(_ML))
def test_ml_dtypes_profile_casts_narrow_arrays_as_astype(src):
    """The ml_dtypes profile rewrote NaN codes (e5m2 0x7D, e4m3 0x79, e3m4 0x71...) of an array already
    of the target type, which ml_dtypes' astype keeps: every code of every narrow source, every target."""
    f = fp8emu.get_format(src)
    x = np.arange(1 << f.bits, dtype=np.uint8).view(getattr(ml_dtypes, _ML[src]))
    for dst, ml in _ML.items():
        with np.errstate(all="ignore"):
            try:
                want = x.astype(getattr(ml_dtypes, ml)).view(np.uint8)
            except TypeError:       # ml_dtypes < 0.7 has no cast between these two types: nothing to match
                continue
        np.testing.assert_array_equal(fp8emu.encode(x, dst, profile="ml_dtypes"), want, err_msg=f"{src}->{dst}")
