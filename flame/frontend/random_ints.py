"""Uniform integers in [low, high) from flame's random stream, shared by torch.randint, randint_like and
Tensor.random_, with torch's bounds checks.

The stream gives 24-bit uniform words (flame/ir/ops/random.py: the top 24 bits of each float64 draw,
so the integers equal those drawn from float32's words); they are joined into uniform integers of as
many bits as a range needs. A range r that is a power of two takes exactly its bits. A range up
to 2**31 takes k % r of a k 32 bits wider than r: within 2**-32 of uniform. A wider range keeps the
first of _ROUNDS candidates of r's bit length that falls below r (each does with probability above
1/2), so it is uniform unless none does (probability below 2**-16); torch's 64-bit modulo favours the
low end of such ranges by up to r / 2**64. A range wider than 2**63 (most of the int64 range) is split
in two halves, each drawn so, one chosen with the probability of its size."""

from __future__ import annotations

import math
import warnings

from flame.errors import ArgumentRangeError
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import where
from flame.ir.dtypes import DType, bf16, boolean, f16, f32, f64, finfo, i8, i16, i32, i64, u8

_WORD = 24  # bits of each uniform word of the stream
_MAX_BITS = 63  # a non-negative int64
_EXTRA_BITS_UP_TO = 31  # ranges up to 2**31 are drawn as k % r with 32 bits to spare in 63
_ROUNDS = 16  # rejection rounds for wider ranges: none accepted with probability below 2**-16

# torch's names of the dtypes in random_'s / randint's bounds errors (c10's type names)
_C_NAMES = {u8: "unsigned char", i8: "signed char", i16: "short", i32: "int", i64: "long", f16: "c10::Half",
            bf16: "c10::BFloat16", f32: "float", f64: "double", boolean: "bool"}


def dtype_bounds(dt: DType) -> tuple[int, int]:
    """The integers random_() draws into dt, as torch's: a floating dtype's integers its significand holds
    exactly, [-2**digits, 2**digits]; an integer dtype's whole range; bool [0, 1]."""
    if dt == boolean:
        return 0, 1
    if dt.is_float:
        digits = finfo(dt).nmant + 1
        return -(2**digits), 2**digits
    bits = 8 * dt.itemsize
    return (0, 2**bits - 1) if dt == u8 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def check_bounds(low: int, high: int, dt: DType) -> None:
    """torch's checks of a draw from [low, high) into dt: low < high, and low and high - 1 values dt holds
    (ArgumentRangeError, a RuntimeError, in torch's words); for a floating dtype, torch's warning where
    they are beyond the integers it holds exactly."""
    if not low < high:
        raise ArgumentRangeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}\n"
                                 f"  at {user_location()}")
    exact = dtype_bounds(dt)
    lo, hi = (float(finfo(dt).min), float(finfo(dt).max)) if dt.is_float else exact
    name = _C_NAMES.get(dt, dt.name)
    for what, value in (("from", low), ("to - 1", high - 1)):
        if not lo <= value <= hi:
            raise ArgumentRangeError(f"{what} is out of bounds for {name} ({what} = {value}; {dt.name} holds "
                                     f"{lo:g} .. {hi:g})\n  at {user_location()}")
        if not exact[0] <= value <= exact[1]:
            digits = exact[1].bit_length() - 1
            warnings.warn(f"{what} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision limitations "
                          f"{name} can support discrete uniform distribution only within this range.", stacklevel=3)


def _bits(generator, shape: tuple[int, ...], bits: int) -> Tensor:
    """A uniform integer of `bits` bits (at most 63) per element, an i64 tensor, from ceil(bits / 24) words."""
    words = math.ceil(bits / _WORD)
    u = generator.draw("random_uniform", (words, *shape), f64)  # one word each: its top 24 bits
    k, placed_bits = None, 0
    for w in range(words):
        take = min(_WORD, bits - placed_bits)
        chunk = (u[w] * float(2**take)).floor().to(i64)  # the word's top `take` bits, exactly
        k = chunk if k is None else k + chunk * (2**placed_bits)
        placed_bits += take
    return k


def _below(generator, shape: tuple[int, ...], r: int) -> Tensor:
    """Uniform integers in [0, r), 1 <= r <= 2**63, as i64."""
    if r & (r - 1) == 0:  # a power of two: exactly its bits
        bits = r.bit_length() - 1
        return _bits(generator, shape, bits) if bits else _bits(generator, shape, 1) * 0
    if r <= 2**_EXTRA_BITS_UP_TO:  # k % r of a k 32 bits wider than r
        return _bits(generator, shape, (r - 1).bit_length() + 32) % r
    # wider: candidates of r's bit length, the first below r kept (each is with probability above 1/2)
    bits = (r - 1).bit_length()
    out = _bits(generator, shape, bits) % r  # kept when no candidate is below r
    for _ in range(_ROUNDS):
        k = _bits(generator, shape, bits)
        out = where(k < r, k, out)
    return out


def integers(generator, shape: tuple[int, ...], low: int, high: int, dt: DType) -> Tensor:
    """Uniform integers in [low, high) of dtype dt (bounds already checked with check_bounds)."""
    shape = tuple(int(s) for s in shape)
    r = high - low
    if r <= 2**_MAX_BITS:
        v = _below(generator, shape, r) + low
    else:  # wider than a non-negative int64: the lower half [low, low + r1) or the upper one, by their sizes
        r1 = r // 2
        upper = _bits(generator, shape, _MAX_BITS) >= round(r1 / r * 2**_MAX_BITS)
        v = where(upper, _below(generator, shape, r - r1) + (low + r1), _below(generator, shape, r1) + low)
    return v.to(dt)
