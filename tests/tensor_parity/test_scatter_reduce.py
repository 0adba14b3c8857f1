"""scatter_reduce (flame.* and Tensor.*, and the in-place form) against torch in f64: every reduce, with
and without include_self, along each dim, an index smaller than the input on the other dims, duplicate
positions, ties (amax/amin share the gradient) and zeros (prod); values and gradients, eagerly and inside
@flame.compile; integer inputs (a floor mean), 8-bit integers, bool and f16; NaN; torch's errors."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check

REDUCES = ["sum", "prod", "mean", "amax", "amin"]
RNG = np.random.default_rng(0)
X = RNG.integers(-3, 4, (4, 5)).astype(np.float64)  # small integers: ties and zeros
SRC = RNG.integers(-3, 4, (6, 5)).astype(np.float64)
IDX = {0: RNG.integers(0, 4, (6, 3)), 1: RNG.integers(0, 5, (3, 4))}  # smaller than X on the other dim
FULL = {0: RNG.integers(0, 4, (6, 5)), 1: RNG.integers(0, 5, (4, 5))}
W = RNG.standard_normal((4, 5))


def _run(L, x, src, dim, reduce, include_self, compiled=False, index=FULL):
    idx = L.tensor(index[dim])
    src = src[tuple(slice(0, n) for n in index[dim].shape)]  # torch's backward wants src shaped as index
    w = L.tensor(W)

    def body(a, b):
        return a.scatter_reduce(dim, idx, b, reduce, include_self=include_self)

    if L is flame:
        def step(a, b):
            ga, gb = flame.grad(lambda p, q: (body(p, q) * w).sum(), argnums=(0, 1))(a, b)
            return body(a, b), ga, gb
        out = (flame.compile(step) if compiled else step)(flame.tensor(x), flame.tensor(src))
        return [t.numpy() for t in out]
    a, b = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    y = body(a, b)
    (y * w).sum().backward()
    return [y.detach().numpy(), a.grad.numpy(), b.grad.numpy()]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("index", ["full", "part"])
def test_values_and_gradients_match_torch(index, dim, reduce, include_self, compiled):
    if index == "part" and reduce in ("amax", "amin"):
        pytest.skip("torch's backward of amax/amin raises for an index smaller than self (values: below)")
    index = FULL if index == "full" else IDX
    for x, src in ((X, SRC), (RNG.standard_normal((4, 5)), RNG.standard_normal((6, 5)))):
        want = _run(torch, x, src, dim, reduce, include_self, index=index)
        got = _run(flame, x, src, dim, reduce, include_self, compiled, index=index)
        for g, t, what in zip(got, want, ("value", "grad of self", "grad of src")):
            np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-14, err_msg=what)


SPECIAL = [0.0, 0.0, 2.0, -1.5, np.inf, -np.inf, np.nan, 3.0]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_prod_gradients_with_zeros_infinities_and_nan(dim, include_self, compiled):
    """torch's prod gradient: a NaN or infinity reaches only its own position's factors (flame's scan
    spread 0 * NaN to every factor of its line), a position's only zero gets the product of the others."""
    rng = np.random.default_rng(1)
    for _ in range(4):
        x, src = rng.choice(SPECIAL, (4, 5)), rng.choice(SPECIAL, (6, 5))
        want = _run(torch, x, src, dim, "prod", include_self)
        got = _run(flame, x, src, dim, "prod", include_self, compiled)
        for g, t, what in zip(got, want, ("value", "grad of self", "grad of src")):
            np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-14, err_msg=what)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_integers_nan_and_the_functions(reduce, include_self, compiled):
    xi, si = X.astype(np.int64), SRC.astype(np.int64)
    xn = X.copy()
    xn[1, 2] = np.nan
    sn = SRC.copy()
    sn[3, 0] = np.nan

    def fn(L, x, s):
        return L.scatter_reduce(x, 0, L.tensor(IDX[0]), s, reduce, include_self=include_self)

    check(fn, xi, si, compiled=compiled)
    check(fn, xn, sn, compiled=compiled)
    check(lambda L, x, s: x.scatter_reduce_(1, L.tensor(IDX[1]), s, reduce, include_self=include_self) * 1,
          X, SRC, compiled=compiled)
    check(lambda L, x, s: L.scatter_reduce(x, 0, L.tensor([1]), s, reduce), np.array(2.0), np.array(3.0),
          compiled=compiled)


@pytest.mark.parametrize("call", [
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0]), L.tensor(SRC), "multiply"),
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0]), L.tensor(SRC), "max"),
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0]), L.tensor(SRC), "min"),
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0]), L.tensor(SRC).float(), "sum"),
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0]) + 4, L.tensor(SRC), "sum"),
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0]).float(), L.tensor(SRC), "sum"),
    lambda L: L.tensor(X).scatter_reduce(0, L.tensor(IDX[0])[:, :1], L.tensor(SRC), "amax")[None, :, :, None],
])
def test_refuses_what_torch_refuses(call):
    try:
        call(torch)
    except Exception as e:  # noqa: BLE001
        with pytest.raises((type(e), flame.FlameError)):
            call(flame)
    else:
        call(flame)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.bool_, np.float16])
@pytest.mark.parametrize("reduce", REDUCES)
def test_narrow_and_bool_dtypes(reduce, dtype, compiled):
    """bool and 8-bit integers add and multiply in int64, wrapped back (a bool sum is an or); bool's
    mean raises, as torch's."""
    rng = np.random.default_rng(1)
    x, s = rng.integers(0, 120, (4, 3)), rng.integers(0, 120, (6, 3))
    x, s = (x % 2, s % 2) if dtype is np.bool_ else (x, s)
    for include_self in (True, False):
        check(lambda L, a, b, inc=include_self: a.scatter_reduce(0, L.tensor(IDX[0]), b, reduce, include_self=inc),
              x.astype(dtype), s.astype(dtype), compiled=compiled, rtol=2e-3)


SCATTER_X = np.arange(1.0, 13.0).reshape(3, 4)
SCATTER_INDEX = np.array([[0, 1, 0, 2], [0, 0, 1, 1]])
SCATTER_SRC = np.arange(2.0, 10.0).reshape(2, 4)
OLD_SPELLINGS = {
    "multiply src": (lambda L, a, i, s: a.scatter(0, i, s, reduce="multiply"), SCATTER_X, SCATTER_INDEX, SCATTER_SRC),
    "multiply value": (lambda L, a, i: a.scatter(1, i, 2.5, reduce="multiply"), SCATTER_X, SCATTER_INDEX[:, :2]),
    "multiply int value": (lambda L, a, i: a.scatter(1, i, 2.5, reduce="multiply"), SCATTER_X.astype(np.int64),
                           SCATTER_INDEX[:, :2]),
    "multiply in place": (lambda L, a, i, s: a.clone().scatter_(0, i, s, reduce="multiply"), SCATTER_X,
                          SCATTER_INDEX, SCATTER_SRC),
    "add int value": (lambda L, a, i: a.scatter(1, i, 2.5, reduce="add"), SCATTER_X.astype(np.int64),
                      SCATTER_INDEX[:, :2]),
    "unknown": (lambda L, a, i, s: a.scatter(0, i, s, reduce="mean"), SCATTER_X, SCATTER_INDEX, SCATTER_SRC),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", OLD_SPELLINGS)
def test_scatter_reduce_argument_as_torch(name, compiled):
    """scatter(reduce="add" / "multiply"): torch's older spellings of scatter_reduce's "sum" / "prod"."""
    f, *args = OLD_SPELLINGS[name]
    check(f, *args, compiled=compiled)
