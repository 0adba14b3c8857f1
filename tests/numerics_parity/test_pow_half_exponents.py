"""x ** 0.5 and x ** -0.5 of a tensor by a Python number as torch's, eagerly and inside @flame.compile:
torch's pow kernels compute those exponents as sqrt and rsqrt, so -0.0 gives -0.0 and -inf, and -inf
gives NaN, where C's pow (torch's pow by a tensor exponent) gives +0.0 / +inf and inf / 0; gradients are
torch's; under autocast pow stays on the float32 list. torch's CUDA kernel does so in every floating dtype,
its CPU kernel in all but f16: flame's f16 is the CUDA kernel's (the f32 result rounded)."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, check_gradients

X = np.array([-np.inf, -4.0, -0.0, 0.0, 0.25, 2.0, np.inf, np.nan], np.float64)


def _same_bits(got, want):
    """The signs agree too (-0.0 is not 0.0 here), NaN's aside."""
    number = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("exponent", [0.5, -0.5])
def test_half_exponents_of_a_number(exponent, dtype, compiled):
    x = X.astype(dtype)
    fns = (lambda L, x: x**exponent, lambda L, x: x.pow(exponent), lambda L, x: L.pow(x, exponent))
    for fn in fns:
        got = (flame.compile(lambda a, fn=fn: fn(flame, a)) if compiled else lambda a, fn=fn: fn(flame, a))(
            flame.tensor(x))
        want = fn(torch, torch.tensor(x.astype(np.float32) if dtype == "float16" else x)).numpy().astype(dtype)
        assert str(got.dtype) == {"float64": "f64", "float32": "f32", "float16": "f16"}[dtype]
        # within an ulp: torch's CPU kernel for float64 rounds sqrt(2) down on some processors (its
        # vectorised pow), to the correctly rounded value on others; the special values are exact
        np.testing.assert_allclose(got.numpy(), want, rtol=np.finfo(dtype).eps, atol=0)
        _same_bits(got.numpy(), want)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_tensor_exponent_is_c_pow(compiled):
    check(lambda L, x: (x ** L.tensor(0.5, dtype=x.dtype), x ** L.tensor(-0.5, dtype=x.dtype)), X,
          compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("exponent", [0.5, -0.5])
def test_half_exponent_gradients(exponent, compiled):
    w = np.arange(1.0, X.size + 1)
    check_gradients(f"x ** {exponent}", lambda L, x: (x**exponent * L.tensor(w)).sum(), X, compiled)


def test_integer_base_and_autocast():
    check(lambda L, x: (x**0.5, x**-0.5), np.array([0, 1, 4, 9], np.int64), compiled=False)
    x = flame.tensor([4.0, 9.0], dtype=flame.bfloat16)
    with flame.autocast("cuda", dtype=flame.bfloat16):
        assert (x**0.5).dtype == flame.float32 and (x**-0.5).dtype == flame.float32
