"""Tests answering the mutation samples of fp8emu.gemm.sumtree and fp8emu.gemm.cpu_order (tests/MUTATION.md).

Expectations are written out by hand or computed with exact rational / float64 arithmetic, never with the
module under test.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.sumtree import GemmOrder, NotATreeError, SumTree, evaluate, evaluate_order, reveal
