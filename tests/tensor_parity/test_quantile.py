"""quantile and nanquantile (flame.* and Tensor.*) against torch in f64: every interpolation, q as a
number, a 0-d and a 1-D tensor, over every element or a dim, with keepdim, lines holding NaN (quantile:
NaN; nanquantile: the other values, NaN where there are none); values and gradients, eagerly and
inside @flame.compile; torch's errors, of torch's exception type (a q outside [0, 1] or NaN, an unknown
interpolation, an f16 / bf16 input: RuntimeError)."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check

X = np.random.default_rng(0).standard_normal((3, 7))
XN = X.copy()
XN[0, 2] = np.nan
XN[2, :] = np.nan
INTERPOLATIONS = ["linear", "lower", "higher", "midpoint", "nearest"]
QS = {"number": 0.3, "0-d": np.array(0.5), "1-D": np.array([0.0, 0.25, 1.0])}


def _run(L, name, x, q, dim, keepdim, interpolation, compiled=False):
    qq = L.tensor(q, dtype=L.float64) if isinstance(q, np.ndarray) else q

    def body(t):
        y = getattr(L, name)(t, qq, dim=dim, keepdim=keepdim, interpolation=interpolation)
        return y, L.nan_to_num(y).sum()

    if L is flame:
        run = (lambda a: (body(a)[0], flame.grad(lambda b: body(b)[1])(a)))
        y, g = (flame.compile(run) if compiled else run)(flame.tensor(x))
        return y.numpy(), g.numpy()
    t = torch.tensor(x, requires_grad=True)
    y, total = body(t)
    total.backward()
    return y.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (0, True), (None, True)])
def test_matches_torch(dim, keepdim, q, interpolation, compiled):
    for name in ("quantile", "nanquantile"):
        for x in (X, XN):
            want, want_grad = _run(torch, name, x, QS[q], dim, keepdim, interpolation)
            got, got_grad = _run(flame, name, x, QS[q], dim, keepdim, interpolation, compiled)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
            np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-15)


def test_the_methods_are_the_functions():
    t = flame.tensor(X)
    np.testing.assert_array_equal(t.quantile(0.3, 1).numpy(), flame.quantile(t, 0.3, 1).numpy())
    np.testing.assert_array_equal(t.nanquantile(0.3).numpy(), flame.nanquantile(t, 0.3).numpy())


@pytest.mark.parametrize("call", [
    lambda L: L.quantile(L.tensor(X), 1.5),
    lambda L: L.quantile(L.tensor(X), L.tensor([0.5], dtype=L.float32)),
    lambda L: L.quantile(L.tensor(X), L.tensor([[0.5]], dtype=L.float64)),
    lambda L: L.quantile(L.tensor(np.zeros((0, 3))), 0.5),
    lambda L: L.quantile(L.tensor([1, 2, 3]), 0.5),
    lambda L: L.quantile(L.tensor(X), 0.5, interpolation="cubic"),
])
def test_refuses_what_torch_refuses(call):
    with pytest.raises((RuntimeError, ValueError)):
        call(torch)
    with pytest.raises((flame.FlameError, ValueError)):
        call(flame)


REFUSED = {
    "q above 1": lambda L, x: L.quantile(x, 1.5),
    "q below 0": lambda L, x: L.nanquantile(x, -0.25, dim=0),
    "q NaN": lambda L, x: L.quantile(x, float("nan")),
    "unknown interpolation": lambda L, x: L.quantile(x, 0.5, interpolation="cubic"),
    "f16 input": lambda L, x: L.quantile(x.half(), 0.5),
    "bf16 input": lambda L, x: x.bfloat16().nanquantile(0.5, dim=1),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(REFUSED))
def test_refuses_with_torchs_exception_type(name, compiled):
    check(REFUSED[name], X, compiled=compiled, error=RuntimeError)


@pytest.mark.parametrize("name", ["q above 1", "q NaN"])
def test_refuses_a_tensor_q_outside_the_range(name):
    q = np.array([0.5, 1.5 if name == "q above 1" else np.nan])
    check(lambda L, x, q: L.quantile(x, q, dim=1), X, q, compiled=False, error=RuntimeError)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (-1, True), (1, False)])
def test_a_0d_input_along_its_one_dim(dim, keepdim, compiled):
    """A 0-d input's dim 0 (or -1) is all of it, with or without keepdim, as torch's; dim 1 raises."""
    for name in ("quantile", "nanquantile"):
        for q in (0.3, np.array([0.2, 0.5])):
            f = lambda L, x, q=q, name=name: getattr(L, name)(  # noqa: E731
                x, L.tensor(q) if isinstance(q, np.ndarray) else q, dim=dim, keepdim=keepdim
            )
            check(f, np.array(2.5), compiled=compiled)
