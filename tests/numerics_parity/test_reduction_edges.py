"""Reduction edge cases against torch, eagerly and inside @flame.compile: argmax/argmin with keepdim and no
dim, NaN through max()/min()/argmax/topk of a whole tensor, half-precision sums and norms that torch
accumulates in f32 (a square of 300 overflows f16), sum(dtype=bool), integer sums and products that
would overflow their input dtype, prod(dtype=) of an integer dtype, empty tensors, and the gradients of
std at a zero deviation and of the 0-"norm" (a count); var_mean / std_mean's mean with an inf, NaN unless the
inf is the last element (PyTorch's Welford update)."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, gradients

N = np.array([[1.0, np.nan, 3, 2], [5, 5, 1, 5], [np.nan, 2, np.nan, 2]], np.float32)
T = np.array([[1.0, 3, 3, 2], [5, 5, 1, 5], [2, 2, 2, 2]], np.float32)
I = np.array([[1, 3, 0, 2], [0, -5, 1, 5], [0, 0, 0, 0]], np.int32)  # noqa: E741
E = np.zeros((0, 3), np.float32)
HALF = np.full(1000, 300.0, np.float32)
INF = np.array([[1.0, 2, np.inf, 4], [np.inf, 5, 1, 2], [-np.inf, 1, 0, np.inf], [1, 2, 3, -np.inf]])

CASES = {
    "argmax keepdim without dim": (lambda L, x: (x.argmax(keepdim=True), x.argmin(keepdim=True)), T),
    "argmax keepdim without dim 0d": (lambda L, x: x[0, 0].argmax(keepdim=True), T),
    "argmax keepdim without dim 3d": (lambda L, x: x.reshape(3, 2, 2).argmin(None, True), T),
    "max() and min() of a NaN": (lambda L, x: (x.max(), x.min(), x.amax(), x[1:2].min()), N),
    "argmax of a row with NaN": (lambda L, x: (x[0].argmax(), x[0].argmin(), x.argmax(), x.argmin(0)), N),
    "topk of a row with NaN": (lambda L, x: tuple(x[0].topk(2)), N),
    "f16 vector_norm in f32": (lambda L, x: (x.half().norm(), L.linalg.vector_norm(x.half(), 3)), HALF),
    "bf16 vector_norm in f32": (lambda L, x: x.bfloat16().norm(dim=0), HALF),
    "f16 norm that overflows anyway": (lambda L, x: L.linalg.vector_norm(x.half() * 100, 0.5), HALF),
    "f16 sum and mean in f32": (lambda L, x: (x.half().sum(), x.half().mean()), HALF),
    "sum dtype=bool": (lambda L, x: (x.sum(dtype=L.bool), x.sum(1, dtype=L.bool), x.sum(0, True, dtype=L.bool)), I),
    "i32 sum past i32": (lambda L, x: (x.sum(), x.cumsum(0)), np.array([2**31 - 1, 2**31 - 1], np.int32)),
    "i32 prod wraps in i64": (lambda L, x: (x.prod(), x.cumprod(0)), np.array([2**20] * 3, np.int32)),
    "u8 prod in i64": (lambda L, x: x.prod(), np.array([200, 200], np.uint8)),
    "bool prod and cumprod": (lambda L, x: (x.prod(), x.prod(1), x.cumprod(0)), I > 0),
    "empty int reductions": (lambda L, x: (x.long().prod(), x.long().sum(0), x.bool().sum()), E),
    "empty argmax along a kept dim": (lambda L, x: x.argmax(0), E),
    "empty std and norm": (lambda L, x: (x.std(), x.var(1), x.norm(), x.nanmean()), E),
    "empty norm inf over nothing raises": (lambda L, x: L.linalg.vector_norm(x, float("inf")), E),
    "argmax of ties with inf": (
        lambda L, x: (x.argmax(1), x.argmin(1)),
        np.array([[np.inf, np.inf, 1]] * 2, np.float32),
    ),
    "std of a NaN row": (lambda L, x: (x.std(1), tuple(L.std_mean(x, 1))), N),
    "var_mean's mean is NaN after an inf": (
        lambda L, x: (L.var_mean(x, 1), L.std_mean(x, 0, correction=0, keepdim=True), L.var_mean(x[:2, :3], (0, 1))),
        INF,
    ),
    "var_mean's mean of a last inf": (
        lambda L, x: (L.var_mean(x[:, 3]), L.std_mean(x[1:, 2:], (1, 0)), L.var_mean(x.t(), 1, keepdim=True)),
        INF,
    ),
    "var_mean's mean of half inputs with inf": (lambda L, x: L.var_mean(x.half(), 1), INF),
    "prod with an integer dtype keeps it": (
        lambda L, x: (x.prod(dtype=L.int32), x.prod(1, dtype=L.int8), x.prod(0, True, dtype=L.uint8)),
        I.astype(np.int64) + 3,
    ),
    "prod of bool and f32 to an integer dtype": (
        lambda L, x: ((x > 2).prod(dtype=L.int32), x.prod(1, dtype=L.int32), x.prod(dtype=L.int8)),
        T,
    ),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_reduction_edge(name, compiled):
    f, *args = CASES[name]
    check(f, *args, compiled=compiled, atol=1e-6)


GRADS = {
    "std of a constant row": lambda L, x: x.std(1).sum(),
    "std keepdim of a constant column": lambda L, x: (x.std(0, keepdim=True) * 2).sum(),
    "std of all": lambda L, x: x[2].std(),
    "std_mean": lambda L, x: L.std_mean(x, 1, correction=0)[0].sum(),
    "std correction 2": lambda L, x: x.std(1, correction=2).sum(),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", GRADS)
def test_std_gradient_is_zero_at_zero_deviation(name, compiled):
    """torch's std backward masks the gradient where the result is 0 (sqrt's derivative is infinite)."""
    f = GRADS[name]
    x = np.array([[1.0, 3, 3, 2], [5, 5, 1, 5], [2, 2, 2, 2]])
    got, want = gradients(f, x, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not np.isnan(got).any()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_zero_norm_is_differentiable_with_a_zero_gradient(compiled):
    """torch's vector_norm(x, 0) requires grad and its backward runs (leaving no gradient): flame's gives zeros."""
    x = np.array([[1.0, 0, 3], [0, 0, -2]])
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.linalg.vector_norm(tx, 0)
    ty.backward()
    assert ty.requires_grad and (tx.grad is None or not tx.grad.any())
    if compiled:
        value, got = flame.compile(lambda a: flame.value_and_grad(lambda y: flame.linalg.vector_norm(y, 0))(a))(
            flame.tensor(x)
        )
    else:
        fx = flame.tensor(x, requires_grad=True)
        value = flame.linalg.vector_norm(fx, 0)
        assert value.requires_grad
        value.backward()
        got = fx.grad
    assert value.item() == ty.item()
    np.testing.assert_array_equal(got.numpy(), np.zeros_like(x))
