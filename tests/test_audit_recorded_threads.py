"""Fourth fresh audit: a recorded order's thread count is a positive integer, never read as another count."""

import numpy as np
import pytest

from fp8emu.gemm.cpu_order import RECORDED
from fp8emu.gemm.mkl_cnr import MODEL, tile_classes


@pytest.mark.parametrize("threads", [None, 0, -1, 2.5, "2", True])
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recorded_models_order_takes_a_positive_integer_thread_count(name, threads):
    # before: mkl-2024.2-avx512 read "2" and None as one thread (64x1000x64 summed unsplit, where two threads
    # split K); mkl-2024.2-compatible tiled None, 0, 2.5 and "2" as two threads and True as one
    with pytest.raises(ValueError, match=r"threads must be a positive integer \(torch's thread count\), got"):
        RECORDED[name].order(64, 1000, 64, threads)
    with pytest.raises(ValueError, match=r"threads must be a positive integer"):
        RECORDED[name].order(64, 0, 64, threads)


@pytest.mark.parametrize("threads", [None, 0, 2.5, "2", True])
def test_tile_classes_takes_a_positive_integer_thread_count(threads):
    with pytest.raises(ValueError, match=r"threads must be a positive integer"):
        tile_classes(20, 20, threads)


def test_integer_thread_counts_give_the_orders_as_before():
    a = RECORDED["mkl-2024.2-avx512"]
    assert a.order(64, 1000, 64, np.int64(2)).describe() == "fma [0:250] + [250:500] + ([500:750] + [750:1000]) (fma start)"
    assert a.order(64, 1000, 64, 1).describe() == "fma [0:384] + [384:692] + [692:1000] (fma start)"
    # two threads cut a 20 x 20 output into two 10-row parts: rows 8, 9 and 18, 19 past their 4-row tiles
    assert tile_classes(20, 20, np.int64(2))[:, 0].tolist() == [0] * 8 + [2] * 2 + [0] * 8 + [2] * 2
    assert MODEL.order(20, 400, 20, 3).describe() == MODEL.order(20, 400, 20, 2).describe()
