"""Integer and rounding arithmetic against torch, eagerly and inside @flame.compile: division rounded toward
zero of floats (trunc of the rounded quotient: 1.0 / 0.1 is 10), floor division and remainder of floats at
0.1, 0 and infinity, integer wrap-around (abs and negation of the minimum, i32 sums and products), shifts
of narrow integers, comparisons of large integers with floats, rounding half to even, torch's dtypes of
copysign and clamp of integers and bools, and torch's errors where an op has only floating kernels
(frac, lerp, logaddexp, logaddexp2, hypot, addcdiv of two integer tensors; an integer or bool beside a float
is converted to the float dtype first)."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check

TENTHS = np.array([1.0, 2.0, 0.3, -1.0, 7.0, -0.7, 1e10], np.float32)
F = np.array([1.0, -1.0, 5.5, -5.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
I = np.array([-7, -3, 0, 3, 7, 8])  # noqa: E741
D = np.array([2, -2, 3, -3, 2, -5])

CASES = {
    "div trunc by 0.1": (
        lambda L, x: (x.div(0.1, rounding_mode="trunc"), L.div(x, -0.1, rounding_mode="trunc")),
        TENTHS,
    ),
    "div trunc f64": (lambda L, x: x.div(0.1, rounding_mode="trunc"), TENTHS.astype(np.float64)),
    "div trunc by tensor": (lambda L, x, y: x.div(y, rounding_mode="trunc"), TENTHS, TENTHS[::-1].copy()),
    "div trunc int by float": (lambda L, x: x.div(0.3, rounding_mode="trunc"), I),
    "div trunc and floor by 0": (
        lambda L, x: (x.div(0.0, rounding_mode="trunc"), x.div(0.0, rounding_mode="floor")),
        F,
    ),
    "div_ trunc in place": (lambda L, x: x.div_(0.1, rounding_mode="trunc"), TENTHS),
    "div trunc and floor of ints": (
        lambda L, x, y: (x.div(y, rounding_mode="trunc"), x.div(y, rounding_mode="floor")),
        I,
        D,
    ),
    "floor_divide and remainder by 0.1": (lambda L, x: (x // 0.1, x % 0.1), TENTHS),
    "floor_divide and remainder by 0": (lambda L, x: (x // 0.0, x % 0.0, x // -0.0), F),
    "remainder by infinity": (lambda L, x: (x % float("inf"), x % float("-inf"), x // float("inf")), F),
    "infinity floor-divided": (lambda L, x: (x // 2.0, x % 2.0, x // -2.0, x % -2.0), F),
    "abs and neg of i64 min": (lambda L, x: (x.abs(), -x), np.array([-(2**63), 5])),
    "abs and neg of i8 min": (lambda L, x: (x.abs(), -x, x.neg()), np.array([-128, 5], np.int8)),
    "i32 add and mul wrap": (lambda L, x: (x + x, x * 3, x - (-x)), np.array([2**31 - 1, -(2**31), 5], np.int32)),
    "i32 plus a Python int past i32": (lambda L, x: (x + 2**40, x * (2**32 + 3)), np.array([1, 2], np.int32)),
    "shifts of i8": (lambda L, x: (x << 1, x >> 1, x << 7, x >> 7, x << 8), np.array([-128, 127, 5, -1], np.int8)),
    "shifts of u8": (lambda L, x: (x << 1, x >> 1, x << 7, x << 8), np.array([255, 127, 5, 1], np.uint8)),
    "shifts of i32 by the width": (
        lambda L, x: (x << 31, x >> 31, x << 32, x >> 32),
        np.array([1, -1, 3, -7], np.int32),
    ),
    "i64 compared with a float in f32": (
        lambda L, x: (x == 16777216.0, x > 16777216.0, x < 16777217.0),
        np.array([16777217, 16777216]),
    ),
    "u8 compared with numbers out of range": (lambda L, x: (x > -1, x == -56, x < 300), np.array([0, 200], np.uint8)),
    "round half to even": (
        lambda L, x: (x.round(), L.round(x)),
        np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 1e8 + 0.5], np.float32),
    ),
    "round f64 half to even": (
        lambda L, x: x.round(),
        np.array([0.5, 2.5, -0.5, 4503599627370497.0, 0.49999999999999994]),
    ),
    "trunc floor ceil round of ints": (lambda L, x: (x.trunc(), x.floor(), x.ceil(), x.round()), I),
    "sign of narrow ints": (lambda L, x: (x.sign(), x.to(L.int8).sign()), np.array([0, 1, 200], np.uint8)),
    "copysign of ints is f32": (lambda L, x, y: (L.copysign(x, y), x.copysign(-1.5), L.copysign(x, y.double())), I, D),
    "copysign of bools": (lambda L, x: L.copysign(x > 0, -1), I),
    "clamp of bools with int bounds": (lambda L, x: (x.clamp(0, 1), x.clamp(max=0)), np.array([True, False])),
    "clamp ints with 0-d f64 and f32 bounds": (
        lambda L, x, lo: x.clamp(lo, L.tensor(3.5, dtype=L.float64)),
        np.array([1, 5], np.int32),
        np.array([1.5, 1.5], np.float32),
    ),
    "clamp ints with a 0-d f64 bound": (lambda L, x: x.clamp(L.tensor(1.5, dtype=L.float64)), I.astype(np.int32)),
    "clamp u8 with a 0-d i64 bound": (
        lambda L, x: x.clamp(L.tensor(3), L.tensor(150)),
        np.array([1, 5, 200], np.uint8),
    ),
    "clamp f32 with a 0-d f64 bound": (lambda L, x: x.clamp(max=L.tensor(0.5, dtype=L.float64)), F),
    "frac of ints raises": (lambda L, x: x.frac(), I),
    "lerp of ints raises": (lambda L, x: x.lerp(x, 0.5), I),
    "lerp with an int end raises": (lambda L, x, y: L.lerp(x, y, 0.5), F, np.arange(10)),
    "logaddexp of ints raises": (lambda L, x: L.logaddexp(x, x), I),
    "logaddexp of an int and a float": (lambda L, x, y: L.logaddexp(x, y), I, I.astype(np.float32) / 2),
    "hypot of ints raises": (lambda L, x: L.hypot(x, x), I),
    "logaddexp2 of ints raises": (lambda L, x: L.logaddexp2(x, x), I),
    "hypot of integer minima and floats": (
        lambda L, x, y: (L.hypot(x, y), L.hypot(x.int(), y), L.hypot(x.int(), y.half()), L.hypot(y.double(), x)),
        np.array([-(2**63), -(2**31), 7, 2**62]),
        np.array([-0.0, 1.0, np.nan, np.nan], np.float32),
    ),
    "hypot and logaddexp of bools and floats": (
        lambda L, b, y: (L.hypot(b, y), L.hypot(y.half(), b), L.logaddexp(b, y), L.logaddexp2(y, b)),
        np.array([True, False, True, False]),
        np.array([-0.0, 1.0, np.inf, -2.5], np.float32),
    ),
    "addcdiv of two int tensors raises": (lambda L, x: L.addcdiv(x.float(), x, x), I),
    "addcdiv of an int and a float": (lambda L, x: L.addcdiv(x.float(), x, x.float() + 0.5), I),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_integer_math(name, compiled):
    f, *args = CASES[name]
    check(f, *args, compiled=compiled, atol=1e-6)


def test_the_errors_name_the_op_and_the_users_line():
    with pytest.raises(flame.errors.DTypeError, match=r'"frac" is not implemented for i64(.|\n)*test_integer_math'):
        flame.tensor([1, 2]).frac()
    with pytest.raises(flame.errors.DTypeError, match="integer division with addcdiv"):
        flame.addcdiv(flame.zeros(2), flame.tensor([1, 2]), flame.tensor([1, 2]))
