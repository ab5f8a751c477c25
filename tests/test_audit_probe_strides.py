"""``probes.layer_passes`` of operands that are NumPy views of any strides.

A reversed view (``w[::-1]``, ``b[::-1]``: negative strides) of a float32 weight or bias was torch's
"At least one stride in the given numpy array is negative" from ``torch.from_numpy``; an input view worked.
"""

import numpy as np
import pytest

pytest.importorskip("torch")

from fp8emu.torch import probes  # noqa: E402


@pytest.mark.parametrize("recipe,gpu", [("te-current", "h100"), ("te-delayed", "h100"), ("te-mxfp8", "b200")])
def test_views_of_negative_or_fortran_strides_give_the_contiguous_copys_bits(recipe, gpu):
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((32, 64), (32, 64), (32, 32)))
    b = rng.standard_normal(32).astype(np.float32)
    views = (x[::-1], w[::-1], b[::-1], np.asfortranarray(dy))
    want = probes.layer_passes(*(np.ascontiguousarray(a) for a in views), recipe, gpu)
    got = probes.layer_passes(*views, recipe, gpu)
    for p in want:
        np.testing.assert_array_equal(got[p], want[p])
    # the float64 reference takes the same views
    ref = probes.exact_passes(*views)
    np.testing.assert_allclose(ref["fprop"], np.float64(x[::-1]) @ np.float64(w[::-1]).T + b[::-1], rtol=1e-12)
