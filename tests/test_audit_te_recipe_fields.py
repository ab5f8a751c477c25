"""TE recipe fields of wrong types or values that changed what ran, silently (fourteenth audit, part A).

``NVFP4BlockScaling(fp4_format=Format.E4M3)`` (or ``fp8_format=Format.E5M2``) ran NVFP4's E2M1 with E4M3 scales:
the fields were not read, where TE's ``__post_init__`` asserts "Only E2M1 is supported for NVFP4 scaling" (and
E4M3 for the scales).  ``DelayedScaling(fp8_dpa="False")`` (a string from a config file) is true, and
``te.DotProductAttention`` ran FP8 attention under it, silently.  Each is now one error at ``autocast``.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

R = te.recipe


@pytest.mark.parametrize("field, value, accepted", [("fp4_format", R.Format.E4M3, "E2M1"),
                                                    ("fp4_format", "E5M2", "E2M1"),
                                                    ("fp8_format", R.Format.E5M2, "E4M3"),
                                                    ("fp8_format", R.Format.HYBRID, "E4M3"),
                                                    ("fp8_format", None, "E4M3")])
def test_nvfp4_formats_other_than_tes_are_refused(field, value, accepted):
    with pytest.raises(ValueError, match=rf"^NVFP4BlockScaling: {field}=.* is not supported \(TE asserts it\); "
                                         rf"accepted: Format.{accepted}$"):
        te.autocast(recipe=R.NVFP4BlockScaling(**{field: value}), gpu="b200")


@pytest.mark.parametrize("kw", [{}, {"fp4_format": R.Format.E2M1, "fp8_format": R.Format.E4M3},
                                {"fp4_format": "e2m1", "fp8_format": "E4M3"}])
def test_nvfp4_with_tes_formats_runs_as_before(kw):
    with te.autocast(recipe=R.NVFP4BlockScaling(**kw), gpu="b200"):
        assert te.current_autocast().training.name == "te-nvfp4"


@pytest.mark.parametrize("cls", [R.DelayedScaling, R.Float8CurrentScaling, R.MXFP8BlockScaling,
                                 R.Float8BlockScaling, R.NVFP4BlockScaling])
@pytest.mark.parametrize("value", ["False", 0, 1, None])
def test_fp8_dpa_must_be_a_bool(cls, value):
    with pytest.raises(TypeError, match=rf"^{cls.__name__}: fp8_dpa must be True or False, got {value!r}$"):
        te.autocast(recipe=cls(fp8_dpa=value), gpu="b200")


def test_fp8_dpa_false_and_true_run_as_before():
    torch.manual_seed(0)
    dpa = te.DotProductAttention(4, 16, attention_dropout=0.0).eval()
    q = k = v = torch.randn(32, 2, 4, 16)
    high = dpa(q, k, v)
    with te.autocast(recipe=R.DelayedScaling(fp8_dpa=False)):
        assert torch.equal(dpa(q, k, v), high)
    with te.autocast(recipe=R.DelayedScaling(fp8_dpa=True)):
        assert not torch.equal(dpa(q, k, v), high)        # FP8 attention: other bits
