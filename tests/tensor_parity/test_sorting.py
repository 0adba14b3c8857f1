"""Sorting and selection against torch: sort/argsort (stable=True: torch's indices; NaN sorts largest),
topk/kthvalue (values; at ties torch's unstable order leaves the index unspecified, so indices are
checked to hold the values), msort, unique (sorted, inverse, counts, dim; every NaN distinct),
searchsorted/bucketize (right, side, sorter, out_int32; NaN where torch's binary search puts it),
bincount (weights, minlength), histc (f16 and bf16 binned in their own dtype), eagerly and inside
@flame.compile (unique, bincount and histc of the data's range are eager only: their size or range
depends on values)."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check, run_torch

T = np.array([[1.0, 3, 3, 2, 3], [5, 5, 1, 5, 0], [2, 2, 2, 2, 2]], np.float32)
N = np.array([[1.0, np.nan, 3, -np.inf, np.inf], [5, -0.0, 0.0, 5, np.nan]], np.float32)
I = np.array([[1, 3, 3, 2], [5, -5, 1, 5]], np.int64)  # noqa: E741
B = np.array([True, False, True, False])
cases = {}
for nm, x in [
    ("ties", T),
    ("nan", N),
    ("int", I),
    ("bool", B),
    ("i32", I.astype(np.int32)),
    ("u8", np.abs(I).astype(np.uint8)),
]:
    cases[f"sort stable {nm}"] = (lambda L, x: tuple(x.sort(stable=True)), x)
    cases[f"sort stable desc {nm}"] = (lambda L, x: tuple(x.sort(dim=0, descending=True, stable=True)), x)
    cases[f"sort values {nm}"] = (lambda L, x: x.sort().values, x)
    cases[f"sort desc values {nm}"] = (lambda L, x: L.sort(x, descending=True)[0], x)
    cases[f"argsort stable {nm}"] = (lambda L, x: L.argsort(x, stable=True), x)
    cases[f"argsort desc stable {nm}"] = (lambda L, x: x.argsort(dim=-1, descending=True, stable=True), x)
    if nm == "bool":  # torch: topk is not implemented for bool (flame's answers)
        continue
    cases[f"topk values {nm}"] = (lambda L, x: x.topk(2).values, x)
    cases[f"topk smallest values {nm}"] = (lambda L, x: x.topk(2, largest=False).values, x)
    cases[f"topk dim0 {nm}"] = (lambda L, x: x.topk(1, dim=0).values, x)
    cases[f"msort {nm}"] = (lambda L, x: L.msort(x), x)
    cases[f"unique {nm}"] = (lambda L, x: L.unique(x), x)
    cases[f"unique inverse counts {nm}"] = (lambda L, x: L.unique(x, return_inverse=True, return_counts=True), x)
    cases[f"unique dim0 {nm}"] = (lambda L, x: L.unique(x, dim=0, return_inverse=True, return_counts=True), x)
    cases[f"unique sorted=False {nm}"] = (lambda L, x: L.unique(x, sorted=False).sort().values, x)
    cases[f"unique method {nm}"] = (lambda L, x: x.unique(return_counts=True), x)
F = np.array([[0.1, 0.5, 0.2, 0.9], [3, 1, 2, 0]], np.float32)
cases["topk sorted=False values sorted"] = (lambda L, x: x.topk(3, sorted=False).values.sort().values, F)
cases["topk k=0"] = (lambda L, x: tuple(x.topk(0)), F)
cases["topk k too big"] = (lambda L, x: x.topk(5), F)
cases["topk indices distinct"] = (lambda L, x: tuple(x.topk(2)), F)
cases["topk 0d"] = (lambda L, x: tuple(x[0, 0].topk(1)), F)
cases["topk 0d k=0"] = (lambda L, x: tuple(x[0, 0].topk(0, -1, largest=False)), F)  # torch: the 0-d tensor
cases["topk 0d k=2"] = (lambda L, x: x[0, 0].topk(2), F)
cases["sort 0d"] = (lambda L, x: tuple(x[0, 0].sort()), F)
cases["sort empty"] = (lambda L, x: tuple(x[:, :0].sort()), F)
cases["argsort default"] = (lambda L, x: x.argsort(), F)
cases["kthvalue k big"] = (lambda L, x: x.kthvalue(5), F)
S = np.array([1.0, 2, 2, 3, 5], np.float32)
V = np.array([[0.0, 2, 2.5, 6, -1], [1, 1, 3, 5, 9]], np.float32)
cases["searchsorted"] = (lambda L, s, v: L.searchsorted(s, v), S, V)
cases["searchsorted right"] = (lambda L, s, v: L.searchsorted(s, v, right=True), S, V)
cases["searchsorted side"] = (lambda L, s, v: L.searchsorted(s, v, side="right"), S, V)
cases["searchsorted int32"] = (lambda L, s, v: L.searchsorted(s, v, out_int32=True), S, V)
cases["searchsorted scalar"] = (lambda L, s: L.searchsorted(s, 2.0), S)
cases["searchsorted 2d"] = (lambda L, s, v: L.searchsorted(s, v), np.sort(V, 1), V)
cases["searchsorted sorter"] = (
    lambda L, s, v: L.searchsorted(s, v, sorter=L.argsort(s)),
    np.array([3.0, 1, 2], np.float32),
    V,
)
cases["searchsorted int"] = (lambda L, s, v: L.searchsorted(s, v), np.array([1, 3, 5]), np.array([0, 3, 4, 6]))
SN = np.array([[1.0, 2, 2, np.inf, np.nan, np.nan], [1.0, np.nan, np.nan, np.nan, np.nan, np.nan]], np.float32)
VN = np.array([[0.5, 2, np.inf, np.nan], [0.5, 1, 2, np.nan]], np.float32)
cases["searchsorted NaN as torch's binary search"] = (
    lambda L, s, v: (L.searchsorted(s, v), L.searchsorted(s, v, right=True), L.searchsorted(s[0], v)),
    SN,
    VN,
)
cases["bucketize NaN goes past the end"] = (lambda L, v, s: (L.bucketize(v, s), L.bucketize(v, s, right=True)), VN, S)
cases["searchsorted 1000 sorted"] = (
    lambda L, s, v: (L.searchsorted(s, v), L.searchsorted(s, v, right=True)),
    np.repeat(np.arange(500.0), 2),
    np.arange(-1.0, 501.0, 0.5),
)
cases["bucketize"] = (lambda L, v, s: L.bucketize(v, s), V, S)
cases["bucketize right"] = (lambda L, v, s: L.bucketize(v, s, right=True), V, S)
cases["bucketize int32"] = (lambda L, v, s: L.bucketize(v, s, out_int32=True), V, S)
cases["bucketize scalar"] = (lambda L, s: L.bucketize(2.0, s), S)
C = np.array([1, 3, 3, 0, 7, 1])
W = np.array([0.5, 1, 2, 3, 1, 1], np.float32)
cases["bincount"] = (lambda L, c: L.bincount(c), C)
cases["bincount minlength"] = (lambda L, c: L.bincount(c, minlength=10), C)
cases["bincount weights"] = (lambda L, c, w: L.bincount(c, weights=w), C, W)
cases["bincount weights f64"] = (lambda L, c, w: L.bincount(c, weights=w), C, W.astype(np.float64))
cases["bincount weights int"] = (lambda L, c, w: L.bincount(c, weights=w), C, C)
cases["bincount empty"] = (lambda L, c: L.bincount(c[:0]), C)
cases["bincount empty minlength"] = (lambda L, c: L.bincount(c[:0], minlength=3), C)
cases["bincount negative"] = (lambda L, c: L.bincount(c - 2), C)
cases["bincount i32"] = (lambda L, c: L.bincount(c), C.astype(np.int32))
cases["bincount u8"] = (lambda L, c: L.bincount(c), C.astype(np.uint8))
cases["bincount float"] = (lambda L, c: L.bincount(c), W)
cases["bincount 2d"] = (lambda L, c: L.bincount(c), C.reshape(2, 3))
H = np.array([0.1, 0.5, 1.0, 1.5, 2.0, 2.0, -1, 3], np.float32)
cases["histc"] = (lambda L, x: L.histc(x, bins=4), H)
cases["histc range"] = (lambda L, x: L.histc(x, bins=4, min=0, max=2), H)
cases["histc default range"] = (lambda L, x: x.histc(), H)
cases["histc int"] = (lambda L, x: L.histc(x, bins=3), C)
cases["histc f64"] = (lambda L, x: L.histc(x, bins=3), H.astype(np.float64))
cases["histc constant"] = (lambda L, x: L.histc(x * 0 + 1, bins=3), H)
cases["histc min>max"] = (lambda L, x: L.histc(x, bins=3, min=2, max=1), H)
cases["histc nan"] = (lambda L, x: L.histc(x, bins=3, min=0, max=3), np.array([np.nan, 1, 2], np.float32))
HR = np.random.default_rng(1).standard_normal(400)
cases["histc range f16"] = (lambda L, x: L.histc(x.half(), bins=100, min=-3, max=3), HR)
cases["histc range bf16"] = (lambda L, x: L.histc(x.bfloat16(), bins=7, min=-1, max=0.5), HR)
cases["histc f16"] = (lambda L, x: L.histc(x.half(), bins=30), HR)
cases["histc bf16"] = (lambda L, x: L.histc(x.bfloat16(), bins=4), HR)

EAGER_ONLY = ("unique", "bincount", "histc")
COMPILED_TOO = ("histc range", "histc nan", "histc min>max", "histc int")  # histc given its range traces
PARAMS = [
    (n, c)
    for n in cases
    for c in (False, True)
    if not (c and any(k in n for k in EAGER_ONLY) and not n.startswith(COMPILED_TOO))
]


@pytest.mark.parametrize("name,compiled", PARAMS, ids=[f"{n}-{'compiled' if c else 'eager'}" for n, c in PARAMS])
def test_sorting_and_selection(name, compiled):
    f, *args = cases[name]
    check(f, *args, compiled=compiled)


X = np.random.default_rng(1).integers(0, 4, (6, 50)).astype(np.float32)  # many ties
UNSTABLE = {
    "sort": lambda L, x: x.sort(),
    "sort descending": lambda L, x: x.sort(descending=True),
    "topk": lambda L, x: x.topk(5),
    "topk smallest": lambda L, x: x.topk(5, largest=False),
    "kthvalue": lambda L, x: x.kthvalue(7),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", UNSTABLE)
def test_ties_give_torch_values_and_indices_holding_them(name, compiled):
    f = UNSTABLE[name]
    theirs, _ = run_torch(f, (X,))
    fn = (lambda a: f(flame, a)) if not compiled else flame.compile(lambda a: tuple(f(flame, a)))
    values, indices = fn(flame.tensor(X))
    np.testing.assert_array_equal(values.numpy(), theirs[0].numpy())
    assert str(indices.dtype) == "i64" and tuple(indices.shape) == tuple(theirs[1].shape)
    i = indices.numpy()
    i2 = i if i.ndim == 2 else i[:, None]
    np.testing.assert_array_equal(np.take_along_axis(X, i2, 1).reshape(values.shape), values.numpy())
    assert all(len(set(row)) == len(row) for row in i2.tolist())  # distinct positions
