"""Indexing edge cases against torch, eagerly and inside @flame.compile: a 0-d integer tensor index selects as
an int does (it does not move the advanced-index dims to the front), a Python bool index adds a dim of size
1 (True) or 0 (False) as a 0-d bool mask (eager and compiled; a 0-d bool tensor eager), among index tensors
too,
a value with leading dims of size 1 written through x[key] = v, torch's dtype errors of index_put,
scatter, masked_select and take, flip with a dim named twice, index_select with a 0-d index, take with
negative and out-of-range indices, and the gradients of these reads and writes."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check, gradients

X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)


def put(t, key, value):
    """A copy of t with copy[key] = value."""
    t = t.clone()
    t[key] = value
    return t


CASES = {
    "x[0-d, :, i]": lambda L, x: x[L.tensor(1), :, L.tensor([0, 2])],
    "x[i, 0-d, j]": lambda L, x: x[L.tensor([1, 0]), L.tensor(-1), L.tensor([0, 3])],
    "x[:, 0-d, i]": lambda L, x: x[:, L.tensor(2), L.tensor([[0], [3]])],
    "x[0-d, ..., 0-d]": lambda L, x: x[L.tensor(-1), ..., L.tensor(3)],
    "x[0-d i32, None]": lambda L, x: x[L.tensor(1, dtype=L.int32), None],
    "x[0-d] out of range": lambda L, x: x[:, L.tensor(3)],
    "x[0-d, :, i] = v": lambda L, x: put(x, (L.tensor(1), slice(None), L.tensor([0, 2])), L.ones(3, 2) * 7),
    "x[0-d, :, i] = v broadcast": lambda L, x: put(x, (L.tensor(0), slice(None), L.tensor([1, 3])), L.tensor([5.0, 6])),
    "x[i, :, 0] int and index": lambda L, x: x[L.tensor([1, 0]), :, 0],
    "x[key] = v with leading ones": lambda L, x: put(x, (0, 0), L.ones(1, 1, 4)),
    "x[key] = v with too many leading dims": lambda L, x: put(x, (0, 0), L.ones(2, 1, 4)),
    "x[mask] = v with leading ones": lambda L, x: put(x, x > 20, L.ones(1, 1)),
    "x[i] = v with leading ones": lambda L, x: put(x, L.tensor([1, 0]), L.arange(12.0).reshape(1, 3, 4)),
    "index_put with int values raises": lambda L, x: x.index_put((L.tensor([1]),), L.tensor(5)),
    "index_put with f64 values raises": lambda L, x: x.index_put((L.tensor([1]),), L.tensor(5.0, dtype=L.float64)),
    "index_put_ with int values raises": lambda L, x: x.index_put_((L.tensor([1]),), L.tensor([5])),
    "index_put with a number": lambda L, x: L.zeros(3).index_put((L.tensor([1, 1]),), L.tensor(2.0), accumulate=True),
    "scatter with f64 src raises": lambda L, x: L.zeros(3, 4).scatter(1, L.tensor([[1]]), x[0].double()),
    "scatter_ with int src raises": lambda L, x: L.zeros(3, 4).scatter_(1, L.tensor([[1]]), x[0].long()),
    "scatter with a number": lambda L, x: L.zeros(3, 4, dtype=L.int64).scatter(1, L.tensor([[1]]), 2),
    "masked_select with an int mask raises": lambda L, x: L.masked_select(x, L.ones(2, 3, 4, dtype=L.int64)),
    "masked_select with a u8 mask raises": lambda L, x: x.masked_select(L.ones(4, dtype=L.uint8)),
    "flip with a dim twice raises": lambda L, x: x.flip(0, 0),
    "flip with -1 and 2 raises": lambda L, x: x.flip((-1, 2)),
    "flip with no dims": lambda L, x: x.flip(()),
    "index_select with a 0-d index": lambda L, x: (x.index_select(1, L.tensor(2)), L.index_select(x, -1, L.tensor(0))),
    "take": lambda L, x: (L.take(x, L.tensor([[0, 23], [-1, 5]])), x.take(L.tensor(-24))),
    "take out of range": lambda L, x: x.take(L.tensor([24])),
    "take with an i32 index raises": lambda L, x: x.take(L.tensor([1], dtype=L.int32)),
    "take of a 0-d tensor": lambda L, x: x[0, 0, 1].take(L.tensor([0, -1, 0])),
    "x[True]": lambda L, x: x[True],
    "x[False]": lambda L, x: x[False],
    "x[None, True]": lambda L, x: x[None, True],
    "x[0, True, 1]": lambda L, x: x[0, True, 1],
    "x[..., False]": lambda L, x: x[..., False],
    "x[True, True]": lambda L, x: x[True, True],
    "x[True, ..., False]": lambda L, x: x[True, ..., False],
    "x[True, i]": lambda L, x: x[True, L.tensor([1, 0])],
    "x[i, :, True]": lambda L, x: x[L.tensor([1, 0]), :, True],
    "x[False, i] raises": lambda L, x: x[False, L.tensor([1, 0])],
    "0-d x[True]": lambda L, x: x[0, 0, 0][True],
    "x[True] = v": lambda L, x: put(x, True, L.arange(4.0) * 7),
    "x[None, True, 0] = v": lambda L, x: put(x, (None, True, 0), 5.0),
    "x[False] = v": lambda L, x: put(x, False, 5.0),
}
EAGER = {
    "x[True]": lambda L, x: x[L.tensor(True)],
    "x[False]": lambda L, x: x[L.tensor(False)],
    "x[0, True, 1]": lambda L, x: x[0, L.tensor(True), 1],
    "x[..., False]": lambda L, x: x[..., L.tensor(False)],
    "0-d x[True]": lambda L, x: x[0, 0, 0][L.tensor(True)],
    "masked_select of a 0-d mask": lambda L, x: L.masked_select(x[0, 0, 1], L.tensor(True)),
    "x[True, i] 0-d": lambda L, x: x[L.tensor(True), L.tensor([1, 0])],
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_index_edge(name, compiled):
    check(CASES[name], X, compiled=compiled)


@pytest.mark.parametrize("name", EAGER)
def test_zero_dim_bool_index(name):
    """A 0-d bool index is a new dim of size 1 (True) or 0 (False): eager only, as every mask read."""
    check(EAGER[name], X, compiled=False)


def test_zero_dim_bool_index_inside_compile_says_why():
    with pytest.raises(flame.TraceError, match="boolean mask"):
        flame.compile(lambda x: x[flame.tensor(True)])(flame.tensor(X))


GRADS = {
    "x[0-d, :, i]": lambda L, x: (x[L.tensor(1), :, L.tensor([0, 2, 2])] * L.arange(3.0, dtype=x.dtype)[:, None]).sum(),
    "x[i, 0-d, j]": lambda L, x: (x[L.tensor([1, 1]), L.tensor(-1), L.tensor([0, 3])] ** 2).sum(),
    "x[0-d, :, i] = v": lambda L, x: (
        put(x * 2, (L.tensor(1), slice(None), L.tensor([0, 2])), x[0, :, :2] * 3) ** 2
    ).sum(),
    "x[key] = v with leading ones": lambda L, x: (put(x * 1, (0, 0), x[1, :1, None] * 5) ** 2).sum(),
    "take": lambda L, x: (L.take(x, L.tensor([[0, 23], [-1, 0]])) * L.tensor([1.0, 2], dtype=x.dtype)).sum(),
    "index_select 0-d": lambda L, x: (x.index_select(1, L.tensor(2)) ** 2).sum(),
    "x[True]": lambda L, x: (x[True] * L.arange(4.0, dtype=x.dtype)).sum(),
    "x[0, True, 1]": lambda L, x: (x[0, True, 1] ** 2).sum(),
    "x[False]": lambda L, x: x[None, False].sum() + x[0, 0, 0],
    "x[True, i]": lambda L, x: (x[True, L.tensor([1, 1])] ** 2).sum(),
    "x[True] = v": lambda L, x: (put(x * 2, (True, 0), x[1] * 3) ** 2).sum(),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", GRADS)
def test_index_edge_gradient(name, compiled):
    f = GRADS[name]
    x = X.astype(np.float64) / 7
    got, want = gradients(f, x, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_dtype_errors_name_the_op_and_the_users_line():
    x = flame.zeros(3)
    with pytest.raises(flame.errors.DTypeError, match=r"index_put(.|\n)*f32(.|\n)*i64(.|\n)*test_index_edges"):
        x.index_put((flame.tensor([1]),), flame.tensor(5))
    with pytest.raises(flame.errors.DTypeError, match=r"scatter(.|\n)*test_index_edges"):
        x.scatter(0, flame.tensor([1]), flame.tensor([1.0], dtype=flame.f64))


@pytest.mark.xfail(
    strict=True,
    reason="flame reads a negative slice step as NumPy does (the elements in reverse); "
    "torch raises ValueError: step must be greater than zero (docs/coming_from_pytorch.md)",
)
def test_negative_slice_step_raises():
    check(lambda L, x: x[::-1], X, compiled=False)


def test_the_new_paths_plan_for_the_gpu_and_their_kernels_compile(cuda_target):
    """A step through a 0-d index, take, std at a zero deviation and a half norm, planned for the CUDA
    target: the reference executor's loss and gradient, and every kernel compiled with NVRTC for sm_90."""
    from tests.ops.test_everyday_ops import check_gpu_step

    w = flame.tensor(X / 7, requires_grad=True)

    def body(w):
        y = w[flame.tensor(1), :, flame.tensor([0, 2])].std(0).sum() + w.take(flame.tensor([-1, 3])).sum()
        loss = y + w.half().norm().float() + w[0].std(1, correction=0).sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, w, rtol=1e-3, atol=1e-3)
