"""A GEMM model's fields, step widths and split-K are what they claim to be, or one clear error.

``GemmModel`` took any object for its row and policy (a row's name, a dict) and failed at the
first GEMM with ``AttributeError: 'str' object has no attribute 'block_scaled'``; ``Policy(split_k=n)``
says K is cut into n pieces, and an integer the split rule (whole 128-wide K-tiles, equal pieces,
the remainder last) cannot make was run as fewer pieces, silently.
"""

import numpy as np
import pytest

import fp8emu
from fp8emu import GemmModel, Policy, scaled_mm, step_row
from fp8emu.gemm.catalogue import INSTRUCTIONS
from fp8emu.gemm.models import split_bounds

HOPPER = INSTRUCTIONS["hopper-wgmma"]


@pytest.mark.parametrize("instruction", ["hopper-wgmma", 3, {"step": 32}], ids=repr)
def test_a_models_row_must_be_an_instruction(instruction):
    with pytest.raises(TypeError, match=r"GemmModel instruction must be an fp8emu.gemm.Instruction"):
        GemmModel("x", "instruction", instruction, Policy(promote=4))


@pytest.mark.parametrize("policy", [{"promote": 4}, None, "cublas", (4, "cublas")], ids=repr)
def test_a_models_policy_must_be_a_policy(policy):
    with pytest.raises(TypeError, match=r"GemmModel policy must be an fp8emu.Policy"):
        GemmModel("x", "instruction", HOPPER, policy)
    with pytest.raises(TypeError, match=r"GemmModel policy must be an fp8emu.Policy"):
        GemmModel("x", "exact", policy=policy)


@pytest.mark.parametrize("name", [3, None, b"x", ""], ids=repr)
def test_a_models_name_is_a_non_empty_string(name):
    with pytest.raises(TypeError, match=r"GemmModel name must be a non-empty string"):
        GemmModel(name, "exact")


def test_well_formed_models_run_as_before():
    a = fp8emu.encode(np.array([[1.0, 2.0, 0.5, 0.25] * 8]), "e4m3fn")
    b = fp8emu.encode(np.ones((32, 1)), "e4m3fn")
    for m in (GemmModel("h", "instruction", HOPPER, Policy(promote=np.int64(4))),
              GemmModel("s", "instruction", step_row(8, 20, 22, "rne", name="odd"), Policy()),
              GemmModel(np.str_("e"), "exact")):
        assert scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=m)[0, 0] == 30.0


def _ab(K):
    rng = np.random.default_rng(K)
    a = fp8emu.encode(rng.standard_normal((2, K)), "e4m3fn")
    b = fp8emu.encode(rng.standard_normal((K, 2)), "e4m3fn")
    return a, b


@pytest.mark.filterwarnings("ignore:K = .* is not a multiple of 16")
@pytest.mark.parametrize("K, split", [(640, 4), (64, 2), (300, 5), (16384, 30)])
def test_an_integer_split_k_the_rule_cannot_make_is_refused(K, split):
    # 640 = 5 K-tiles: pieces of ceil(5 / 4) = 2 tiles make 3 pieces, not 4; one tile is one piece
    tiles = -(-K // 128)
    made = len(split_bounds(K, split)) - 1
    assert made != split                                    # what was run silently
    a, b = _ab(K)
    m = GemmModel("s", "instruction", HOPPER, Policy(split_k=split))
    with pytest.raises(ValueError, match=rf"split_k={split} cannot cut K = {K} \({tiles} K-tile"):
        scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=m)


@pytest.mark.filterwarnings("ignore:K = .* is not a multiple of 16")
@pytest.mark.parametrize("K, split", [(640, 3), (640, 5), (300, 3), (16384, 6), (128, 1), (0, 1)])
def test_an_integer_split_k_the_rule_makes_runs_as_its_pieces(K, split):
    a, b = _ab(K)
    m = GemmModel("s", "instruction", HOPPER, Policy(split_k=split))
    one = GemmModel("one", "instruction", HOPPER, Policy())
    got = scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=m)
    bounds = split_bounds(K, split)
    assert len(bounds) - 1 == split or K == 0
    want = np.zeros((2, 2), np.float32)
    for k0, k1 in zip(bounds, bounds[1:]):
        if k1 > k0:
            part = scaled_mm(a[:, k0:k1], b[k0:k1], a_format="e4m3fn", b_format="e4m3fn", accumulator=one)
            want = (want + part).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("policy, kscale", [(Policy(promote=4), None), (Policy(), lambda kb: np.ones((1, 1)))])
def test_run_steps_refuses_an_accumulator_input_it_would_drop(policy, kscale):
    # the promoted chains start from zero: c was left out of the sum silently (ones gave the sum without them)
    from fp8emu.gemm.models import run_steps
    a = np.full((1, 256), 0x38, np.uint8)
    m = GemmModel("h", "instruction", HOPPER, policy)
    with pytest.raises(ValueError, match=r"an accumulator input C is modelled without promotion"):
        run_steps(m, a, "e4m3fn", a.T.copy(), "e4m3fn", c=np.ones((1, 1), np.float32), kscale=kscale)
    one = GemmModel("one", "instruction", HOPPER, Policy())
    assert run_steps(one, a, "e4m3fn", a.T.copy(), "e4m3fn", c=np.ones((1, 1), np.float32))[0, 0] == 257


@pytest.mark.parametrize("args", [(32, 32, 2.7e4), (32, 32, "16384"), (-5, 32, 16384), (32, 32, True),
                                  (32.9, 32, 16384), (32, None, 16384)], ids=repr)
def test_cublas_split_k_takes_non_negative_integer_sizes(args):
    # 2.7e4 was truncated, "16384" parsed, True read as K = 1, a negative M counted as one output tile
    from fp8emu.gemm import cublas_split_k
    with pytest.raises(ValueError, match=r"cublas_split_k: M, N, K must be non-negative integers"):
        cublas_split_k(*args)


@pytest.mark.parametrize("args", [(16384, 2.5), (16384, True), (16384, "6"), (16384, 6.0), (16384.0, 6),
                                  ("16384", 6), (-128, 2)], ids=repr)
def test_split_bounds_takes_integers(args):
    # splits 2.5 made 2 pieces, True 1, "6" and 6.0 were taken; K = -128 gave [0, 0]
    with pytest.raises(ValueError, match=r"split_bounds: K must be a non-negative integer and splits a positive"):
        split_bounds(*args)


def test_split_helpers_answer_as_before():
    from fp8emu.gemm import cublas_split_k
    assert cublas_split_k(32, 32, 16384) == 6 and cublas_split_k(np.int64(32), 32, np.int64(4096)) == 1
    assert split_bounds(16384, np.int64(6)) == [0, 2816, 5632, 8448, 11264, 14080, 16384]
    assert split_bounds(0, 4) == [0, 0] and split_bounds(300, 1) == [0, 300]


@pytest.mark.parametrize("step", [4097, 1 << 40])
def test_a_step_of_more_than_4096_products_is_refused_before_any_gemm(step):
    # 2**40 was accepted, and the first GEMM failed with NumPy's "Unable to allocate 4.00 TiB"
    from fp8emu.gemm import step_row
    with pytest.raises(ValueError, match=r"step must be at most 4096 products"):
        step_row(step, 13, 14)
    assert step_row(4096, 13, 14).step == 4096
