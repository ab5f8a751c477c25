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


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_every_shipped_vector_parts_some_pair_of_candidates(name):
    """19 of the 256 Rubin UE5M3 x32 vectors gave the same bits under every candidate, while
    validate-gpu called them discriminating; a vector whose candidates' outputs are all equal settles nothing."""
    outputs = load_vectors(name)["outputs"]
    idle = [r for r in range(outputs.shape[1]) if len({int(x) for x in outputs[:, r]}) == 1]
    assert idle == []


def test_validate_prints_what_the_vectors_part_as_computed(monkeypatch):
    """Every number validate-gpu --tc-questions prints comes from the shipped outputs; a GPU that behaves
    like the first candidate is shown reproducing all of them (no GPU needed: its outputs are stood in)."""
    monkeypatch.setattr(tc_questions, "gpu_available", lambda: (True, None))
    monkeypatch.setattr(tc_questions, "gpu_outputs", lambda q, z, torch: z["outputs"][0])
    lines = []
    res = tc_questions.validate(out=lines.append)
    for name, q in QUESTIONS.items():
        outputs = load_vectors(name)["outputs"]
        n = outputs.shape[1]
        parting = sum(len({int(x) for x in outputs[:, r]}) > 1 for r in range(n))
        weakest = min(sum(int(outputs[i, r]) != int(outputs[j, r]) for r in range(n))
                      for i in range(len(outputs)) for j in range(i + 1, len(outputs)))
        head = [ln for ln in lines if ln.startswith(name + " ")]
        assert head == [f"{name} ({q.text}), {n} vectors; {parting} of them part at least two candidates, and "
                        f"every pair of candidates differs on at least {weakest}:"]
        assert res[name][q.candidates[0][0]] == n
        assert sum(v == n for v in res[name].values()) == 1
