"""``fp8emu validate-gpu``'s claims against what it does, without a GPU (tests/AUDIT.md, "Fresh audit of the CPU
order, probes, compile and filters")."""

import ml_dtypes
import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.gpu import tc_questions, validate


def _case(source):
    return validate.CastCase("ml_dtypes", "e5m2", "ml_dtypes", "rne", source,
                             lambda x: x.astype(ml_dtypes.float8_e5m2))


def test_limit_shortens_the_float32_sweep_only(capsys):
    # the help says "Cast every float32 (or the first --limit) and every float16/bfloat16 bit pattern" and
    # "--limit N: validate only the first N float32 patterns"; --limit 100 cast 100 float16 patterns too
    with pytest.raises(SystemExit):
        main(["validate-gpu", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "every float16/bfloat16 bit pattern" in text and "only the first N float32 patterns" in text
    results = validate.run([_case("float16"), _case("bfloat16"), _case("float32")], limit=100, out=lambda s: None)
    assert [r.inputs for r in results] == [1 << 16, 1 << 16, 100]
    assert all(r.status == "ok" for r in results)
    # the inputs counted are the patterns cast: float16's are all 65,536 codes, in order
    seen = []
    validate.run([validate.CastCase("ml_dtypes", "e5m2", "ml_dtypes", "rne", "float16",
                                    lambda x: (seen.append(x.view(np.uint16).copy()), x.astype(
                                        ml_dtypes.float8_e5m2))[1])], limit=3, out=lambda s: None)
    assert np.array_equal(np.concatenate(seen), np.arange(1 << 16, dtype=np.uint16))


def test_tc_questions_refuse_the_sweeps_options_they_would_ignore(capsys):
    # `--tc-questions --limit 5 --no-scaled-mm` ran the vectors (or said "skipped") and ignored both options
    for extra in (["--limit", "5"], ["--no-scaled-mm"]):
        assert main(["validate-gpu", "--tc-questions", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"fp8emu validate-gpu: error: --tc-questions runs only the tensor-core vectors; it takes no "
                       f"{extra[0]}"]


def test_tc_questions_exit_1_when_no_candidate_reproduces_a_question(monkeypatch, capsys):
    # a GPU that follows none of a question's candidates exited 0, which the help calls "all matched"
    monkeypatch.setattr(tc_questions, "gpu_available", lambda: (True, None))

    def none_of_them(q, z, torch):
        got = np.array(z["outputs"][0])
        got[0] = max(int(v) for v in z["outputs"][:, 0]) + 1     # a bit pattern no candidate gave
        return got
    monkeypatch.setattr(tc_questions, "gpu_outputs", none_of_them)
    assert main(["validate-gpu", "--tc-questions"]) == validate.EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "<- reproduces every output" not in out
    # a GPU that follows the first candidate of every question: all matched
    monkeypatch.setattr(tc_questions, "gpu_outputs", lambda q, z, torch: z["outputs"][0])
    assert main(["validate-gpu", "--tc-questions"]) == validate.EXIT_OK
