"""The discriminating tensor-core vectors: they discriminate, they are what the candidates give, and
the GPU check skips cleanly where there is no CUDA device."""

import subprocess
import sys

import numpy as np
import pytest

from fp8emu.gpu import tc_questions
from fp8emu.gpu.tc_questions import QUESTIONS, blocked_scale_layout, candidate_outputs, judge, load_vectors


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_vectors_tell_every_candidate_apart(name):
    q, z = QUESTIONS[name], load_vectors(name)
    assert list(z["labels"]) == [c[0] for c in q.candidates]
    bits = z["outputs"]
    assert bits.shape == (len(q.candidates), 256)
    for i in range(len(bits)):
        for j in range(i + 1, len(bits)):
            assert (bits[i] != bits[j]).sum() >= 50, (z["labels"][i], z["labels"][j])
    # a GPU that behaves like one candidate is recognised as that one alone
    for j in range(len(bits)):
        score = judge(q, z, bits[j])
        assert [k for k, v in score.items() if v == bits.shape[1]] == [z["labels"][j]]


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_shipped_outputs_are_the_candidates_outputs(name):
    q, z = QUESTIONS[name], load_vectors(name)
    outs = candidate_outputs(q, z)
    for j, lab in enumerate(z["labels"]):
        np.testing.assert_array_equal(outs[str(lab)].view(np.uint32), z["outputs"][j])


def test_blocked_layout_is_a_permutation_of_the_tile():
    s = np.arange(128 * 4, dtype=np.int64).reshape(128, 4)
    out = blocked_scale_layout(s)
    assert sorted(out.tolist()) == list(range(512))
    # rows 0, 32, 64, 96 of one column are neighbours (4 apart), a row's 4 columns are adjacent
    assert out[0:4].tolist() == [0, 1, 2, 3] and out[4:8].tolist() == s[32].tolist()
    assert out[16:20].tolist() == s[1].tolist()


def test_validate_gpu_tc_questions_skips_without_a_gpu():
    ok, _ = tc_questions.gpu_available()
    if ok:
        pytest.skip("a CUDA device is present")
    r = subprocess.run([sys.executable, "-m", "fp8emu", "validate-gpu", "--tc-questions"], capture_output=True,
                       text=True)
    assert r.returncode == 3, r.stderr
    assert "skipped" in r.stdout
