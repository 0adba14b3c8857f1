"""Reductions against torch: result dtypes (bool and integer sums in int64, nansum of integers), dim
forms (None, (), tuples, negative, duplicates), keepdim, var/std corrections (n <= correction gives
inf), median/kthvalue (NaN propagation; at ties torch leaves the index unspecified, so the index is
checked to hold the value), max/min with dim (values read at the index: the gradient goes there),
reductions over empty dims, logsumexp of -inf, norms of every order, and gradients at ties, eagerly and
inside @flame.compile."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check, gradients, run_torch

r = np.random.default_rng(0)
F = r.standard_normal((3, 4)).astype(np.float32)
T = np.array([[1.0, 3, 3, 2], [5, 5, 1, 5], [2, 2, 2, 2]], np.float32)  # ties
N = np.array([[1.0, np.nan, 3, 2], [5, 5, 1, 5], [np.nan, 2, np.nan, 2]], np.float32)
I = np.array([[1, 3, 3, 2], [5, -5, 1, 5], [2, 2, 2, 2]], np.int32)  # noqa: E741
B = I > 2
E = np.zeros((0, 3), np.float32)
cases = {}
for nm, x in [
    ("f32", F),
    ("i32", I),
    ("bool", B),
    ("i64", I.astype(np.int64)),
    ("u8", np.abs(I).astype(np.uint8)),
    ("i8", I.astype(np.int8)),
    ("f16", F.astype(np.float16)),
]:
    for op in ["sum", "prod", "cumsum", "cumprod", "amax", "amin", "nansum"]:
        for dim in [None, 0, -1]:
            if op.startswith("cum") and dim is None:
                continue
            cases[f"{op} {nm} dim={dim}"] = (
                lambda L, x, op=op, dim=dim: getattr(x, op)() if dim is None else getattr(x, op)(dim),
                x,
            )
    cases[f"sum {nm} dtype f64"] = (lambda L, x: x.sum(dtype=L.float64), x)
    cases[f"sum {nm} dim keepdim"] = (lambda L, x: x.sum(1, keepdim=True), x)
    cases[f"cumsum {nm} dtype i32"] = (lambda L, x: x.cumsum(0, dtype=L.int32), x)
    cases[f"prod {nm} dtype f32"] = (lambda L, x: x.prod(1, dtype=L.float32), x)
    cases[f"max {nm} dim"] = (lambda L, x: tuple(x.max(1)), x)
    cases[f"min {nm} dim keep"] = (lambda L, x: tuple(x.min(0, keepdim=True)), x)
    cases[f"argmax {nm}"] = (lambda L, x: (x.argmax(), x.argmax(1), x.argmax(0, keepdim=True)), x)
    cases[f"argmin {nm}"] = (lambda L, x: (x.argmin(), x.argmin(1), x.argmin(0, keepdim=True)), x)
    cases[f"max all {nm}"] = (lambda L, x: (x.max(), x.min()), x)
    cases[f"median {nm}"] = (lambda L, x: (x.median(), tuple(x.median(1)), tuple(x.median(0))), x)
    cases[f"any/all {nm}"] = (lambda L, x: (x.any(), x.all(), x.any(1), x.all(0, keepdim=True)), x)
    cases[f"count_nonzero {nm}"] = (lambda L, x: (L.count_nonzero(x), L.count_nonzero(x, 1)), x)
for nm, x in [("ties", T), ("nan", N)]:
    cases[f"max dim {nm}"] = (lambda L, x: (tuple(x.max(1)), tuple(x.min(1)), tuple(x.max(0))), x)
    cases[f"argmax {nm}"] = (lambda L, x: (x.argmax(), x.argmax(1), x.argmin(1), x.argmin()), x)
    cases[f"median {nm}"] = (lambda L, x: (x.median(), tuple(x.median(1)), tuple(x.median(0))), x)
    cases[f"amax {nm}"] = (lambda L, x: (x.amax(1), x.amin(0), x.amax((0, 1))), x)
    cases[f"nanmean {nm}"] = (lambda L, x: (x.nanmean(), x.nanmean(1)), x)
    cases[f"nansum {nm}"] = (lambda L, x: (x.nansum(), x.nansum(1)), x)
    cases[f"sum/mean {nm}"] = (lambda L, x: (x.sum(), x.mean(1)), x)
    cases[f"logsumexp {nm}"] = (lambda L, x: (x.logsumexp(1), L.logsumexp(x, (0, 1))), x)
    cases[f"aminmax {nm}"] = (lambda L, x: tuple(L.aminmax(x, dim=1)), x)
x = F
for corr in [0, 1, 2]:
    cases[f"var corr {corr}"] = (
        lambda L, x, c=corr: (x.var(correction=c), x.var(1, correction=c), x.std(0, correction=c, keepdim=True)),
        x,
    )
cases["var unbiased False"] = (lambda L, x: (x.var(unbiased=False), x.var(1, unbiased=False), x.std(1, False)), x)
cases["var positional"] = (lambda L, x: (x.var(1, True, True), x.std(0, False)), x)
cases["var N<=corr"] = (lambda L, x: (x.var(0, correction=3), x.var(0, correction=4), x.std(0, correction=5)), x)
cases["var of 1"] = (lambda L, x: (x[:1].var(0), x[0, 0].var()), x)
cases["var_mean"] = (
    lambda L, x: (tuple(L.var_mean(x, 1)), tuple(L.std_mean(x, 0, correction=0)), tuple(L.var_mean(x))),
    x,
)
cases["var int"] = (lambda L, x: x.var(), I)
cases["var dims tuple"] = (lambda L, x: x.var((0, 1)), x)
cases["mean dim tuple"] = (lambda L, x: (x.mean((0, 1)), x.mean((-1,)), x.sum(())), x)
cases["mean dim=()"] = (lambda L, x: x.mean(()), x)
cases["amax dim=()"] = (lambda L, x: x.amax(()), x)
cases["sum dim list"] = (lambda L, x: x.sum([0, 1], keepdim=True), x)
cases["sum dup dims"] = (lambda L, x: x.sum((0, 0)), x)
cases["sum bad dim"] = (lambda L, x: x.sum(2), x)
cases["empty sum"] = (lambda L, x: (x.sum(), x.sum(0), x.prod(0), x.prod(), x.mean(0), x.mean()), E)
cases["empty max"] = (lambda L, x: x.max(), E)
cases["empty amax dim0"] = (lambda L, x: x.amax(0), E)
cases["empty amax dim1"] = (lambda L, x: x.amax(1), E)
cases["empty max dim1"] = (lambda L, x: tuple(x.max(1)), E)
cases["empty argmax"] = (lambda L, x: x.argmax(), E)
cases["empty logsumexp"] = (lambda L, x: x.logsumexp(0), E)
cases["empty logsumexp dims"] = (
    lambda L, x: (
        x.logsumexp((0, 1)),
        x.reshape(0, 3, 1).logsumexp((-2, -1), keepdim=True),
        x.reshape(3, 1, 0).logsumexp((1, 0)),
    ),
    E,
)
cases["empty var"] = (lambda L, x: x.var(0), E)
cases["empty median"] = (lambda L, x: x.median(), E)
cases["empty any"] = (lambda L, x: (x.any(), x.all(), x.any(0)), E)
cases["nansum dtype"] = (lambda L, x: (x.nansum(dtype=L.float64), L.nansum(x, 1, True, dtype=L.int64)), N)
cases["nansum int dtype"] = (lambda L, x: (x.nansum(dtype=L.float32), (x > 2).nansum(dtype=L.bool)), I)
cases["nanmean dtype"] = (lambda L, x: (x.nanmean(dtype=L.float64), L.nanmean(x.half(), 1, dtype=L.float32)), N)
cases["nanmean int dtype"] = (lambda L, x: x.nanmean(dtype=L.int64), N)
cases["empty cumsum"] = (lambda L, x: x.cumsum(0), E)
cases["logsumexp -inf"] = (lambda L, x: (x.logsumexp(1), x.logsumexp(0)), np.full((2, 3), -np.inf, np.float32))
cases["logsumexp inf"] = (lambda L, x: x.logsumexp(1), np.array([[np.inf, 1.0], [np.inf, -np.inf]], np.float32))
cases["logsumexp int"] = (lambda L, x: x.logsumexp(1), I)
for o in [0, 1, 2, 3, 0.5, float("inf"), float("-inf"), -1, -2]:
    cases[f"vector_norm {o}"] = (
        lambda L, x, o=o: (
            L.linalg.vector_norm(x, o),
            L.linalg.vector_norm(x, o, dim=1),
            L.linalg.vector_norm(x, o, dim=0, keepdim=True),
        ),
        x,
    )
    cases[f"norm p={o}"] = (lambda L, x, o=o: (x.norm(p=o), x.norm(p=o, dim=1)), x)
cases["norm fro"] = (lambda L, x: (x.norm("fro"), L.norm(x, "fro", dim=(0, 1))), x)
cases["norm int"] = (lambda L, x: x.norm(), I)
cases["vector_norm dtype"] = (lambda L, x: L.linalg.vector_norm(x, dtype=L.float64), x)
cases["vector_norm zeros"] = (lambda L, x: L.linalg.vector_norm(x * 0, 0), x)
cases["prod zeros"] = (lambda L, x: (x.prod(), x.prod(1)), np.array([[0.0, 2], [3, 4]], np.float32))
cases["cumprod dtype"] = (lambda L, x: x.cumprod(1, dtype=L.float64), I)
cases["cumsum 0d"] = (lambda L, x: x.cumsum(0), np.array(2.5, np.float32))
cases["sum 0d dim0"] = (lambda L, x: (x.sum(0), x.amax(-1), x.argmax(0), x.mean(0)), np.array(2.5, np.float32))
cases["max 0d dim"] = (lambda L, x: tuple(x.max(0)), np.array(2.5, np.float32))
cases["trace int"] = (lambda L, x: L.trace(x), I[:, :3])
cases["trace bool raises"] = (lambda L, x: L.trace(x), B[:, :3])
cases["trapezoid bool raises"] = (lambda L, x: L.trapezoid(x), B)
cases["cumulative_trapezoid bool raises"] = (lambda L, x: L.cumulative_trapezoid(x, dim=0), B)
cases["max(dim) values names"] = (lambda L, x: (x.max(1).values, x.max(1).indices, x.median(0).indices), T)
cases["nansum int"] = (lambda L, x: x.nansum(), I)
cases["nanmean int"] = (lambda L, x: x.nanmean(), I)
cases["all float"] = (lambda L, x: (x.all(), x.any()), N)
cases["std_mean int"] = (lambda L, x: L.std_mean(x), I)
cases["prod int 0d and empty"] = (lambda L, x: (x[0, 0].prod(0), x[:0].prod(), x[:0].prod(0), x[:0].prod(1)), I)
cases["var_mean keepdim"] = (
    lambda L, x: (tuple(L.var_mean(x, keepdim=True)), tuple(L.std_mean(x, None, keepdim=True, correction=0))),
    x,
)
cases["aminmax keepdim"] = (
    lambda L, x: (tuple(L.aminmax(x, keepdim=True)), tuple(L.aminmax(x[0, 0], keepdim=True))),
    x,
)

for nm, x in [("ties", T), ("nan", N), ("int", I), ("empty", E)]:
    cases[f"median() {nm}"] = (lambda L, x: (x.median(), x.median(-1).values if x.size else x.sum()), x)

TIE_FREE = {
    k: v
    for k, v in cases.items()
    if not (k.startswith("median ") and k.split()[1] in ("ties", "nan", "i32", "i64", "u8", "i8"))
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", TIE_FREE)
def test_reduction(name, compiled):
    f, *args = cases[name]
    check(f, *args, compiled=compiled, atol=2e-6)


SELECTIONS = {
    "kthvalue 2 dim 1": lambda L, x: x.kthvalue(2, 1),
    "kthvalue 1 dim 0 keepdim": lambda L, x: x.kthvalue(1, 0, keepdim=True),
    "kthvalue 3 dim -1": lambda L, x: x.kthvalue(3, -1),
    "median dim 1": lambda L, x: x.median(1),
    "median dim 0 keepdim": lambda L, x: x.median(0, keepdim=True),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("data", ["ties", "nan", "int"])
@pytest.mark.parametrize("name", SELECTIONS)
def test_selection_values_and_an_index_holding_them(name, data, compiled):
    """torch's values, dtypes and shapes; at ties torch's index is unspecified (quickselect), so the
    index must point at an element equal to the value (at a NaN where the value is NaN)."""
    x = {"ties": T, "nan": N, "int": I}[data]
    f = SELECTIONS[name]
    theirs, _ = run_torch(f, (x,))
    fn = (lambda a: f(flame, a)) if not compiled else flame.compile(lambda a: tuple(f(flame, a)))
    values, indices = fn(flame.tensor(x))
    v, i = values.numpy(), indices.numpy()
    assert str(values.dtype) == str(flame.ir.dtypes.dtype_of(str(theirs[0].dtype)[6:]))
    assert str(indices.dtype) == "i64" and v.shape == tuple(theirs[0].shape) and i.shape == v.shape
    np.testing.assert_array_equal(v, theirs[0].numpy())
    axis = 0 if "dim 0" in name else 1
    held = np.take_along_axis(x, i if i.ndim == 2 else np.expand_dims(i, axis), axis).reshape(v.shape)
    np.testing.assert_array_equal(held, v)


GRADS = {
    "amax splits ties": lambda L, x: x.amax(1).sum(),
    "amax all": lambda L, x: x.amax(),
    "amin dim 0 weighted": lambda L, x: (x.amin(0) * L.arange(4.0, dtype=x.dtype)).sum(),
    "max(dim) to its index": lambda L, x: x.max(1).values.sum(),
    "min(dim) to its index": lambda L, x: (x.min(0, keepdim=True).values * 3).sum(),
    "max() splits ties": lambda L, x: x.max(),
    "min() splits ties": lambda L, x: x.min(),
    "median() splits ties": lambda L, x: x.median(),
    "maximum at ties": lambda L, x: L.maximum(x, x.flip(1)).sum(),
    "clamp at its bounds": lambda L, x: x.clamp(2, 3).sum(),
    "norm": lambda L, x: x.norm(),
    "vector_norm inf": lambda L, x: L.linalg.vector_norm(x, float("inf")),
    "vector_norm 1 at 0": lambda L, x: L.linalg.vector_norm(x - 2, 1),
    "vector_norm 0.5": lambda L, x: L.linalg.vector_norm(x - 2, 0.5),
    "std": lambda L, x: x.std(),
    "prod": lambda L, x: x.prod(1).sum(),
    "logsumexp": lambda L, x: x.logsumexp(1).sum(),
    "abs at 0": lambda L, x: (x - 2).abs().sum(),
    "relu at 0": lambda L, x: L.relu(x - 2).sum(),
    "norm at 0": lambda L, x: (x * 0).norm(),
    "vector_norm 0.5 at 0": lambda L, x: L.linalg.vector_norm(x * 0, 0.5),
    "vector_norm inf at 0": lambda L, x: L.linalg.vector_norm(x * 0, float("inf")),
    "logsumexp of -inf": lambda L, x: (x * 0).log().logsumexp(1).sum(),
    "std of one": lambda L, x: x[:1, :1].std(),
    # n <= correction: torch's gradient is 2 (x - mean) / (n - correction), inf at n == correction (NaN
    # where x is the mean), finite past it; its value inf or NaN either way
    "var n == correction": lambda L, x: x.var(0, correction=3).sum(),
    "var n < correction": lambda L, x: (x.var(1, correction=6, keepdim=True) * 0 + x.var(0, correction=5)).sum(),
    "var of one, correction 2": lambda L, x: x[:1].var(0, correction=2).sum(),
    "prod of nothing": lambda L, x: x[:0].prod() + x[:0].prod(0).sum() + x[:, :0].prod(1, keepdim=True).sum(),
    "var_mean n == correction": lambda L, x: L.stack(L.var_mean(x, 1, correction=4)).sum(),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", GRADS)
def test_gradient_at_ties_and_kinks(name, compiled):
    f = GRADS[name]
    x = T.astype(np.float64)
    got, want = gradients(f, x, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
