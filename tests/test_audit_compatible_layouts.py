"""``mkl-2024.2-compatible`` with an unknown thread count keeps the transposed-B caveat
(tests/AUDIT.md, "Third fresh audit of the CPU order, probes, compile and filters")."""

import warnings

import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.mkl_cnr import MODEL


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 8, 2), (17, 300, 16)])
@pytest.mark.parametrize("layout", ["NT", "TT"])
def test_edge_tiles_of_a_transposed_b_warn_whatever_the_thread_count(shape, layout):
    # each of one and two threads is unproven here (edge tiles, B transposed): so is "not known"
    assert MODEL.unproven(*shape, 1, layout) and MODEL.unproven(*shape, 2, layout)
    assert MODEL.unproven(*shape, None, layout) is not None        # was None: called proven
    with cpu_order.use(MODEL.name), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cpu_order.order_for(*shape, threads=None, layout=layout)
    assert any("transposed B" in str(x.message) for x in w)


def test_shapes_tiled_whole_stay_proven_with_an_unknown_thread_count():
    assert MODEL.unproven(40, 3, 40, None, "TT") is None and MODEL.unproven(17, 300, 16, None, "NN") is None
