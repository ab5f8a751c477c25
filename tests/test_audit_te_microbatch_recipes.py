"""TE's micro-batch weight cache (``is_first_microbatch``) of a module reused in two ``autocast`` blocks
(fourteenth audit, part A).

``is_first_microbatch=True`` quantizes the weight and caches the copy; ``False`` reuses it (TE's semantics, kept:
a weight changed in between is not re-read).  The copy is one recipe's codes and scales: a module whose first
micro-batch ran under ``Float8CurrentScaling`` and whose next ran under ``Float8BlockScaling`` (or delayed
scaling) computed the block GEMM with the per-tensor copy, silently.  Now a micro-batch under another recipe
quantizes its own copy, as a first micro-batch under that recipe does.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

R = te.recipe
X = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))


def _linear():
    torch.manual_seed(3)
    return te.Linear(64, 64)


@pytest.mark.parametrize("first, then", [(R.Float8CurrentScaling, R.Float8BlockScaling),
                                         (R.Float8CurrentScaling, R.DelayedScaling),
                                         (R.Float8BlockScaling, R.Float8CurrentScaling)])
def test_a_micro_batch_under_another_recipe_quantizes_its_own_weight_copy(first, then):
    mod, ref = _linear(), _linear()
    with te.autocast(recipe=first()):
        mod(X, is_first_microbatch=True)
        ref(X)                                   # no cache: the same step taken
    with te.autocast(recipe=then()):
        y = mod(X, is_first_microbatch=False)
        expected = ref(X, is_first_microbatch=True)
    assert torch.equal(y, expected)
    # and that copy is cached from here for `then`'s later micro-batches: a weight changed now is not re-read
    with torch.no_grad():
        mod.weight.mul_(2)
        ref.weight.mul_(2)
    with te.autocast(recipe=then()):
        assert torch.equal(mod(X, is_first_microbatch=False), ref(X, is_first_microbatch=False))


def test_the_same_recipe_reuses_the_first_micro_batchs_copy_as_before():
    mod, ref = _linear(), _linear()
    with te.autocast(recipe=R.Float8CurrentScaling()):
        mod(X, is_first_microbatch=True)
        ref(X, is_first_microbatch=True)
        with torch.no_grad():
            mod.weight.mul_(2)               # TE reads the weight at the first micro-batch only
        assert torch.equal(mod(X, is_first_microbatch=False), ref(X, is_first_microbatch=False))
