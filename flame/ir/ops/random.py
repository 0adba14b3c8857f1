"""Counter-based random numbers (Philox4x32-10). The seed and the offset are graph inputs (i64
scalars), so a step is reproducible and replayable: element i of a draw uses counter offset + i and
key seed. The CUDA snippet implements the same function bit for bit on the integer side.

A uniform number carries as many random bits as its dtype's significand: 53 in float64 (torch's
float64 uniform does too), 24 in the narrower dtypes. The 53 bits are the top 24 of one word followed
by the top 29 of another, so a float64 draw's top 24 bits are the narrower draw of the same counter."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, ShapeError
from flame.ir.registry import Attr, OpDef, register
from flame.ir.types import TensorType

PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32(counter: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 of 64-bit counters (uint64 array) under a 64-bit key: four uint32 words each."""
    c0 = counter & _MASK
    c1 = counter >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    m0, m1 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1)
    for _ in range(10):
        p0, p1 = m0 * c0, m1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + np.uint64(PHILOX_W0)) & _MASK
        k1 = (k1 + np.uint64(PHILOX_W1)) & _MASK
    return c0, c1, c2, c3


def _counters(shape, offset):
    n = int(np.prod(shape))
    return np.arange(n, dtype=np.uint64) + np.uint64(int(offset) & 0xFFFFFFFFFFFFFFFF)


NARROW_BITS, WIDE_BITS = 24, 53


def unit_bits(dtype) -> int:
    """The random bits of each uniform number a draw of `dtype` carries: 53 in float64, else 24."""
    return WIDE_BITS if dtype.is_float and dtype.itemsize == 8 else NARROW_BITS


def uniform_bits_to_float(word: np.ndarray, low: np.ndarray | None = None) -> np.ndarray:
    """The top 24 bits of a uint32 word as a float in [0, 1); with a second word `low`, its top 29 bits
    follow them: 53 bits, exact in float64."""
    top = word >> np.uint64(32 - NARROW_BITS)
    if low is None:
        return top.astype(np.float64) * 2.0**-NARROW_BITS
    rest = WIDE_BITS - NARROW_BITS
    return ((top << np.uint64(rest)) | (low >> np.uint64(32 - rest))).astype(np.float64) * 2.0**-WIDE_BITS


def _uniform_ref(seed, offset, shape, dtype):
    w = philox4x32(_counters(shape, offset), int(seed))
    u = uniform_bits_to_float(w[0], w[1] if unit_bits(dtype) == WIDE_BITS else None)
    return u.reshape(shape).astype(dtype.np_dtype)


def _normal_ref(seed, offset, shape, dtype):
    w = philox4x32(_counters(shape, offset), int(seed))
    bits = unit_bits(dtype)
    wide = bits == WIDE_BITS
    u1 = uniform_bits_to_float(w[0], w[2] if wide else None) + 2.0**-bits  # (0, 1]: log is finite
    u2 = uniform_bits_to_float(w[1], w[3] if wide else None)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return z.reshape(shape).astype(dtype.np_dtype)


def _random_infer(name):
    def infer(types, shape, dtype):
        for t, what in zip(types, ("seed", "offset")):
            if t.shape != () or t.dtype.name != "i64":
                raise ShapeError(f"{name}: {what} must be an i64 scalar, got {t}")
        if not dtype.is_float:
            raise DTypeError(f"{name}: dtype must be a float dtype, got {dtype}")
        return TensorType(tuple(shape), dtype)
    return infer


_ATTRS = {"shape": Attr("ints"), "dtype": Attr("dtype")}
_WHY = "random draws do not depend differentiably on seed or offset"
register(OpDef("random_uniform", "elementwise", 2, _random_infer("random_uniform"), _uniform_ref,
               dict(_ATTRS), nondiff=_WHY, doc="uniform in [0, 1)", positional=True, random=True))
register(OpDef("random_normal", "elementwise", 2, _random_infer("random_normal"), _normal_ref,
               dict(_ATTRS), nondiff=_WHY, doc="standard normal (Box-Muller)", positional=True,
               random=True))
