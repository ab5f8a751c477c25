"""``GradConfig`` fields given as NumPy numbers (``draws=np.int64(4)``, ``lr=np.float32(1e-3)``, ``ks=(np.int64(256),)``).

They are refused (the configuration is hashed and stored as JSON, which has no NumPy numbers), but the line said
"draws must be an integer 1.., got np.int64(4)", false of a value that is an integer >= 1; it now says why.
"""

import dataclasses
import re

import numpy as np
import pytest

pytest.importorskip("torch")
from fp8emu.torch.study import grad as G  # noqa: E402


@pytest.mark.parametrize("field, value, head", [
    ("draws", np.int64(4), "draws must be an integer 1.., got np.int64(4)"),
    ("lr", np.float32(1e-3), "lr must be a positive number that float32 holds"),
    ("ks", (np.int64(256),), "ks must be a tuple of distinct integers >= 1, got (np.int64(256),)"),
])
def test_a_numpy_number_is_refused_saying_why(field, value, head):
    with pytest.raises(ValueError, match=re.escape(head) + r".* \(a NumPy number: give Python's, int\(\.\.\.\)"):
        G.plan_cells(dataclasses.replace(G.QUICK, **{field: value}))


def test_a_value_out_of_range_reads_as_before():
    with pytest.raises(ValueError, match=r"^draws must be an integer 1\.\., got 0$"):
        G.plan_cells(dataclasses.replace(G.QUICK, draws=0))
