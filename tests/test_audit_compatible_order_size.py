"""Hostile input: the ``mkl-2024.2-compatible`` order of a large output (``fp8emu.gemm.mkl_cnr``)."""

import tracemalloc

import numpy as np
import pytest

from fp8emu.gemm import mkl_cnr


@pytest.mark.parametrize("M, K, N, threads", [(3001, 400, 3007, 1), (3000, 400, 3000, 2), (3001, 64, 3007, 1)])
def test_the_order_of_many_outputs_holds_one_index_per_output(M, K, N, threads):
    # before: np.unique sorted a copy of every output's class and index[c] made a second array (about
    # 7 bytes per output at the peak; `fp8emu cpu-order 30000x64x30000` took 43 s and 5.5 GB where the
    # other recorded model took 7 s): now one int16 per output and a boolean mask, 4 bytes at most
    tracemalloc.start()
    try:
        order = mkl_cnr.MODEL.order(M, K, N, threads)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * M * N
    c = mkl_cnr.tile_classes(M, N, threads)       # each output's tree is its class's, as the rule says
    trees = [mkl_cnr.block_tree(K), mkl_cnr.edge_tree(K), mkl_cnr.chain_tree(K)]
    for u in np.unique(c):
        assert {order.trees[i] for i in np.unique(order.classes[c == u])} == {trees[u]}
