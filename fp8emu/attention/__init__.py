"""FP8 attention as a kernel computes it: :mod:`fp8emu.attention.emulate` (every public name is here too).

The study over it (context lengths, promotion, pre-scale) is :mod:`fp8emu.lab.attention`.
"""

from __future__ import annotations

from . import emulate
from .emulate import *  # noqa: F401,F403 (the public API, as emulate lists it)

__all__ = list(emulate.__all__)
