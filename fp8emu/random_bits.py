"""The random bits of stochastic rounding: the options that give them (:func:`random_source`) and
the stream they are drawn as (:func:`draw_bits`).

The codec (:func:`fp8emu.encode`) and HiF8 (:func:`fp8emu.hifloat.hif8_encode`) take the same
``rng`` / ``sr_bits`` / ``random_bits`` options and check them here, so both accept and refuse the
same things with the same words.
"""

from __future__ import annotations

import sys

import numpy as np

from .rounding import STOCHASTIC_MODES
from .interop import is_integer

# Bit generators whose ``random_raw`` is the 64-bit stream that ``Generator.integers``
# splits into two 32-bit draws (low half first); MT19937's raw output is 32-bit.
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def draw_bits(gen, k, n):
    """``gen.integers(0, 2**k, n, dtype=np.uint64)`` as uint32 (the documented stream).

    For even ``n`` and a 64-bit bit generator, ``integers`` with a power-of-two
    range up to 2**32 takes the top k bits of consecutive 32-bit halves of the
    raw 64-bit outputs (Lemire's method never rejects there); taking them from
    ``random_raw`` directly gives the same bits and state, several times faster.

    Examples
    --------
    >>> a = draw_bits(np.random.default_rng(1), 5, 4)
    >>> b = np.random.default_rng(1).integers(0, 2**5, 4, dtype=np.uint64)
    >>> a.dtype.name, a.tolist() == b.tolist()
    ('uint32', True)
    """
    if n % 2 == 0 and sys.byteorder == "little" and type(gen.bit_generator) in _RAW64:
        r = gen.bit_generator.random_raw(n // 2).view(np.uint32)
        if k < 32:
            r >>= np.uint32(32 - k)
        return r
    return gen.integers(0, 1 << k, size=n, dtype=np.uint64).astype(np.uint32)


def random_source(rounding, rng, sr_bits, random_bits, shape):
    """Validate the stochastic-rounding options; return (k, bits array or None, Generator).

    Examples
    --------
    >>> random_source("rne", None, None, None, (3,))
    (0, None, None)
    >>> k, bits, gen = random_source("stochastic", 7, 8, None, (3,))
    >>> k, bits, type(gen).__name__
    (8, None, 'Generator')
    >>> random_source("stochastic", None, None, None, (3,))
    Traceback (most recent call last):
    ...
    ValueError: rounding='stochastic' needs a source of randomness: pass rng (np.random.Generator or int seed) or random_bits
    """
    if rounding not in STOCHASTIC_MODES:
        if rng is not None or random_bits is not None or sr_bits is not None:
            raise ValueError("rng, sr_bits and random_bits apply only to rounding='stochastic' and "
                             f"the other stochastic modes ({', '.join(STOCHASTIC_MODES[1:])})")
        return 0, None, None
    if random_bits is None and rng is None:
        raise ValueError(f"rounding={rounding!r} needs a source of randomness: pass rng "
                         "(np.random.Generator or int seed) or random_bits")
    if random_bits is not None and rng is not None:
        raise ValueError("pass either rng or random_bits, not both")
    rb = None
    if random_bits is not None:
        rb = np.asarray(random_bits)
        if rb.dtype.kind not in "iu":
            raise TypeError(f"random_bits must be an unsigned integer array, got dtype {rb.dtype}")
        if sr_bits is None:
            if rb.dtype.kind != "u" or rb.dtype.itemsize > 4:
                raise ValueError("pass sr_bits with random_bits that are not uint8/uint16/uint32")
            sr_bits = rb.dtype.itemsize * 8
    if sr_bits is None:
        sr_bits = 32
    if not is_integer(sr_bits) or not 1 <= sr_bits <= 32:
        raise ValueError(f"sr_bits must be an int in 1..32, got {sr_bits!r}")
    if rb is not None:
        try:
            rb = np.broadcast_to(rb, shape)
        except ValueError:
            raise ValueError(f"random_bits of shape {rb.shape} does not broadcast to {shape}") from None
        if rb.size and (rb.min() < 0 or int(rb.max()) >= (1 << sr_bits)):
            raise ValueError(f"random_bits must lie in [0, 2**sr_bits) = [0, {1 << sr_bits})")
        return int(sr_bits), rb, None
    if is_integer(rng):
        rng = np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}")
    return int(sr_bits), None, rng
