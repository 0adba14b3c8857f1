"""Scalar coefficients (addcmul's value, the GEMMs' beta and alpha, index_add's alpha) against torch: they
are converted to the tensors' dtype rather than promoting it (integer tensors give an integer result, a
float coefficient truncated toward zero, one the dtype cannot hold raising), and add / sub / addr refuse
a float coefficient of integer tensors and a bool one of non-bool tensors (torch's alpha_check); eagerly
and inside @flame.compile."""

import numpy as np
import pytest

from tests.tensor_parity.common import check

M = np.arange(16).reshape(4, 4) - 5
F = (M / 4).astype(np.float32)
COEFFICIENTS = [0.5, 2.7, -1.5, True, 3, 1e30, float("nan")]
OPS = {
    "addcmul": lambda L, x, v: L.addcmul(x, x, x, value=v),
    "addcmul_": lambda L, x, v: x.clone().addcmul_(x, x, value=v),
    "addcmul 0-d value": lambda L, x, v: L.addcmul(x, x, x, value=L.tensor(v)),
    "addcmul mixed": lambda L, x, v: L.addcmul(x.float(), x, x, value=v),
    "addmm beta": lambda L, x, v: L.addmm(x, x, x, beta=v),
    "addmm alpha": lambda L, x, v: L.addmm(x, x, x, alpha=v),
    "addmv": lambda L, x, v: L.addmv(x[0], x, x[1], beta=v, alpha=v),
    "addbmm": lambda L, x, v: L.addbmm(x, x[None], x[None], alpha=v),
    "baddbmm": lambda L, x, v: L.baddbmm(x[None], x[None], x[None], beta=v),
    "index_add": lambda L, x, v: x.index_add(0, L.tensor([0, 0, 2]), x[:3], alpha=v),
    "addr": lambda L, x, v: L.addr(x, x[0], x[1], alpha=v),
    "addr beta": lambda L, x, v: L.addr(x, x[0], x[1], beta=v),
    "add": lambda L, x, v: L.add(x, x, alpha=v),
    "sub": lambda L, x, v: L.sub(x, 2, alpha=v),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("v", COEFFICIENTS, ids=repr)
@pytest.mark.parametrize("op", OPS)
def test_coefficients_of_integer_tensors(op, v, compiled):
    if "0-d" in op and (isinstance(v, bool) or compiled and not abs(v) < 1e18):
        return  # a bool 0-d tensor's value; a traced one's value is not known to check
    check(lambda L, x: OPS[op](L, x, v), M, compiled=compiled)
    check(lambda L, x: OPS[op](L, x, v), M.astype(np.int32), compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("v", [0.5, -1.5, 2, True, 300], ids=repr)
def test_coefficients_of_uint8_and_float_tensors(v, compiled):
    check(lambda L, x: L.addcmul(x, x, x, value=v), np.abs(M).astype(np.uint8), compiled=compiled)
    for op in OPS.values():
        check(lambda L, x, op=op: op(L, x, v), F, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("start", [-1.5, float("nan"), 2.5], ids=repr)
def test_a_float_argument_an_integer_dtype_cannot_hold_raises(start, compiled):
    """c10's checked conversion: a float below an unsigned dtype's zero (or NaN) does not wrap as an int does."""
    check(lambda L, x: L.linspace(start, 3, 3, dtype=L.uint8), M, compiled=compiled)
    check(lambda L, x: L.logspace(start, 3, 3, dtype=L.uint8), M, compiled=compiled)
    check(lambda L, x: x.masked_fill(x > 3, start), np.abs(M).astype(np.uint8), compiled=compiled)


CHECKED = ("add", "sub", "addr", "addr beta", "index_add", "addmv")  # torch's checked conversions


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype,v", [("float16", 1e6), ("float16", -7e4), ("float16", float("inf")),
                                     ("bfloat16", 1e39), ("bfloat16", float("-inf"))], ids=repr)
def test_coefficients_of_half_tensors_that_their_dtype_cannot_hold(dtype, v, compiled):
    """add / sub / addr / index_add / addmv convert alpha (and beta) to the tensors' dtype with torch's
    checked conversion: 1e6 is no f16 coefficient, 1e39 no bf16 one (flame multiplied by them, giving
    infinities); an infinity passes."""
    for name in CHECKED:
        check(lambda L, x, op=OPS[name]: op(L, x.to(getattr(L, dtype)), v), F, compiled=compiled)
