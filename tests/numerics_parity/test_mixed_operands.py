"""Operands of different dtypes against torch, eagerly and inside @flame.compile: the fused pointwise ops
(add and sub with alpha, addcmul, addcdiv, lerp) compute in the result's dtype, each operand converted to
it first (u8 * alpha must not wrap in u8 when the result is i32; a bool result takes alpha as a bool), and
float ops of integers (sinh, cosh, logsumexp) run in the default float dtype (u8 negation or x - max
must not wrap); xlogy computes in the promoted dtype (f64 with f16: the log in f64; an integer with f16: f16)."""

import numpy as np
import pytest

from tests.tensor_parity.common import check

U8 = np.array([0, 1, 7, 128, 200, 255], np.uint8)
I8 = np.array([-128, -7, -1, 0, 1, 127], np.int8)
I32 = np.array([-(2**31), -7, -1, 0, 1, 2**31 - 1], np.int32)
I64 = np.array([-(2**63), -7, 300, 0, 1, 2**63 - 1])
B = np.array([True, False, True, True, False, True])
F32 = np.array([-0.0, -7.5, 1.25, 0.0, 2.5, np.inf], np.float32)

CASES = {
    "add alpha u8 into i32": (lambda L, x, y: (L.add(x, y, alpha=3), L.sub(x, y, alpha=2)), I32, U8),
    "add alpha i8 into i64": (lambda L, x, y: (L.add(x, y, alpha=3), L.sub(y, x, alpha=-2)), I64, I8),
    "add alpha i32 into i64": (lambda L, x, y: L.add(x, y, alpha=3), I64, I32),
    "add alpha of bools": (lambda L, x, y: (L.add(x, y, alpha=3), L.add(y, x, alpha=0)), B, B[::-1].copy()),
    "add alpha bool into ints": (lambda L, x, y: (L.add(x, y, alpha=3), L.add(x.int(), y, alpha=5)), U8, B),
    "sub alpha with a bool raises": (lambda L, x, y: L.sub(x, y, alpha=2), B, U8),
    "add_ alpha in place": (lambda L, x, y: x.add_(y, alpha=300), I32, U8),
    "addcmul u8 into i32": (lambda L, x, y: (L.addcmul(x, y, y, value=2), L.addcmul(x, y, x)), I32, U8),
    "addcmul i8 into f32": (lambda L, x, y: L.addcmul(x, y, y, value=3), F32, I8),
    "addcmul i8 into f16": (lambda L, x, y: L.addcmul(x.half(), y, y), F32, I8),
    "addcmul bool into i8": (lambda L, x, y: L.addcmul(x, y, y, value=2), I8, B),
    "sinh and cosh of integers": (lambda L, x: (x.sinh(), x.cosh()), U8),
    "sinh and cosh of i8 and bools": (lambda L, x, b: (x.sinh(), x.cosh(), b.cosh()), I8, B),
    "logsumexp of integers": (lambda L, x, y: (L.logsumexp(x, 0), y.logsumexp(0), L.logsumexp(x.long(), 0)), U8, I8),
    "logsumexp of bools": (lambda L, b: L.logsumexp(b, 0), B),
    "xlogy of an integer and f16": (lambda L, x, y: (L.xlogy(x, y.half()), L.xlogy(y.half(), x)), U8, F32),
    "xlogy of bools and f64 with f16": (
        lambda L, b, y: (L.xlogy(b, y.abs()), L.xlogy(y.double(), y.half().abs()), y.xlogy(b)),
        B,
        F32,
    ),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_mixed_operands(name, compiled):
    f, *args = CASES[name]
    check(f, *args, compiled=compiled, atol=1e-6)
