"""Activation modules with options against torch: Softmax / LogSoftmax / Softmin with dim=None (the
legacy implicit dim and its warning), GELU approximations, Hardtanh bounds, ELU/CELU/SELU, Softplus beta
and threshold, Threshold, PReLU per channel, GLU dims; values and gradients, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check, rng

X4 = rng(0).standard_normal((2, 3, 4, 2)) * 3
X3 = rng(1).standard_normal((3, 4, 2)) * 3

CASES = [
    ("GELU", {}),
    ("GELU", dict(approximate="tanh")),
    ("Hardtanh", dict(min_val=-0.5, max_val=2.0)),
    ("Hardtanh", {}),
    ("ELU", dict(alpha=0.7)),
    ("CELU", dict(alpha=1.7)),
    ("SELU", {}),
    ("Softplus", dict(beta=2.0, threshold=1.5)),
    ("Softplus", dict(beta=0.5)),
    ("Threshold", dict(threshold=0.3, value=-2.0)),
    ("LeakyReLU", dict(negative_slope=0.2)),
    ("PReLU", {}),
    ("PReLU", dict(num_parameters=3, init=0.1)),
    ("GLU", {}),
    ("GLU", dict(dim=-2)),
    ("GLU", dict(dim=0)),
    ("Softmax", dict(dim=2)),
    ("LogSoftmax", dict(dim=-3)),
    ("Softmin", dict(dim=1)),
    ("Mish", {}),
    ("Hardswish", {}),
    ("Hardsigmoid", {}),
    ("ReLU6", {}),
    ("LogSigmoid", {}),
    ("Softsign", {}),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_activation(case, compiled):
    name, kw = case
    # torch's backward of these holds alpha or 1/6 as an f32 scalar, also for f64 tensors
    tol = dict(rtol=1e-6, atol=1e-8) if name in ("CELU", "Hardsigmoid") else {}
    check(lambda lib: getattr(lib.nn, name)(**kw), lambda m, x: m(x), [X4], compiled, **tol)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax", "Softmin"])
@pytest.mark.parametrize("x", [X4, X3, X3[0], X3[0, 0]], ids=["4d", "3d", "2d", "1d"])
def test_softmax_implicit_dim(name, x, compiled):
    """dim=None is torch's legacy choice: dim 0 for 1-D and 3-D inputs, dim 1 otherwise, with its warning."""
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        check(lambda lib: getattr(lib.nn, name)(), lambda m, x: m(x), [x], compiled)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "softmin"])
def test_functional_softmax_implicit_dim(fn):
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        f = getattr(flame.nn.functional, fn)(flame.tensor(X3)).numpy()
    with pytest.warns(UserWarning):
        t = getattr(torch.nn.functional, fn)(torch.tensor(X3)).numpy()
    np.testing.assert_allclose(f, t, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int16"])
@pytest.mark.parametrize("th, value", [(1.5, 5.7), (-0.5, 7), (0.5, -7.9), (2, 3)])
def test_threshold_of_integers_keeps_their_dtype(th, value, dtype, compiled):
    """An integer input takes threshold and value in its own dtype (truncated), as torch's kernel: the
    result keeps the integer dtype, not a float with value's fraction."""
    x = np.array([[0, 1, 2, -1, -2, 3]], dtype=dtype)
    want = torch.nn.functional.threshold(torch.tensor(x), th, value)
    fn = lambda t: flame.nn.functional.threshold(t, th, value)
    got = (flame.compile(fn) if compiled else fn)(flame.tensor(x))
    assert str(got.dtype) == {"int64": "i64", "int32": "i32", "int16": "i16"}[dtype]
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    module = flame.nn.Threshold(th, value)(flame.tensor(x))
    np.testing.assert_array_equal(module.numpy(), want.numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
@pytest.mark.parametrize("name, fn", [
    ("hardtanh fractional bounds", lambda L, t: L.nn.functional.hardtanh(t, -2.5, 2.5)),
    ("hardtanh", lambda L, t: L.nn.functional.hardtanh(t, 0.5, 6.7)),
    ("relu6", lambda L, t: L.nn.functional.relu6(t)),
    ("ReLU6 module", lambda L, t: L.nn.ReLU6()(t)),
    ("Hardtanh module", lambda L, t: L.nn.Hardtanh(-1.5, 3.0)(t)),
])
def test_hardtanh_of_integers_keeps_their_dtype(name, fn, dtype, compiled):
    """hardtanh and relu6 of an integer input give that integer dtype (the bounds truncated), as torch's."""
    x = np.array([[-3, 0, 9, 2, -1, 6, 7, 3]], dtype=dtype)
    want = fn(torch, torch.tensor(x))
    call = lambda t: fn(flame, t)
    got = (flame.compile(call) if compiled else call)(flame.tensor(x))
    assert str(got.dtype) == {"int64": "i64", "int32": "i32", "int8": "i8"}[dtype]
    np.testing.assert_array_equal(got.numpy(), want.numpy())
