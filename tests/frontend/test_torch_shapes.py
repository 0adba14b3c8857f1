"""Tensor.unfold, slice/select/diagonal_scatter, index_reduce, put, fill_diagonal_, sum_to_size, H / mH / adjoint,
split_with_sizes and the unsafe_ spellings, ger, asarray, empty_strided, isreal, finfo / iinfo and
flame.dtype, against torch: values, dtypes, gradients and errors, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, gradients

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
X = np.arange(24.0).reshape(2, 3, 4) / 7 - 1
M = np.arange(12.0).reshape(3, 4) / 5 - 1

CASES = [
    ("unfold", lambda L, x: x.unfold(2, 2, 1)),
    ("unfold step", lambda L, x: x.unfold(-1, 3, 2)),
    ("unfold dim 0", lambda L, x: x.unfold(0, 2, 1)),
    ("unfold whole", lambda L, x: x.unfold(1, 3, 5)),
    ("slice_scatter", lambda L, x: L.slice_scatter(x, x[:, :, 1:4:2] * 3, 2, 1, 4, 2)),
    ("slice_scatter default", lambda L, x: x.slice_scatter(x ** 2)),
    ("select_scatter", lambda L, x: L.select_scatter(x, x[:, 1, :].exp(), 1, 1)),
    ("select_scatter negative", lambda L, x: x.select_scatter(x[..., -1] * 2, -1, -1)),
    ("diagonal_scatter", lambda L, x: L.diagonal_scatter(x[0], x[1, :, 0] ** 2)),
    ("diagonal_scatter offset", lambda L, x: x.diagonal_scatter(x[:, 0, :3].sin(), 1, 1, 2)),
    ("sum_to_size", lambda L, x: x.sum_to_size(3, 1)),
    ("sum_to_size tuple", lambda L, x: x.sum_to_size((1, 3, 4))),
    ("sum_to_size same", lambda L, x: x.sum_to_size(2, 3, 4)),
    ("adjoint", lambda L, x: L.adjoint(x) * 1),
    ("Tensor.adjoint mH H", lambda L, x: (x.adjoint(), x.mH, x[0].H)),
    ("ger", lambda L, x: L.ger(x[0, 0], x[1, 1]) + x[0, 0].ger(x[1, 2])),
    ("split_with_sizes", lambda L, x: L.split_with_sizes(x, [1, 3], 2)),
    ("Tensor.split_with_sizes", lambda L, x: x.split_with_sizes([2, 1], 1)),
    ("unsafe_split", lambda L, x: (L.unsafe_split(x, 3, -1), x.unsafe_split(1))),
    ("unsafe_chunk", lambda L, x: (L.unsafe_chunk(x, 2, 2), x.unsafe_chunk(3, 1))),
    ("unsafe_split_with_sizes", lambda L, x: L.unsafe_split_with_sizes(x, [2, 2], 2)),
    ("index_reduce prod", lambda L, x: L.index_reduce(x, 1, L.tensor([0, 2, 0, 1]), x.repeat(1, 2, 1)[:, :4] + 2,
                                                      "prod")),
    ("index_reduce amax", lambda L, x: x.index_reduce(2, L.tensor([3, 0, 3]), x[:, :, 1:], "amax",
                                                      include_self=False)),
    ("index_reduce mean", lambda L, x: x.index_reduce(0, L.tensor([1, 1]), x * 3, "mean")),
    ("index_reduce_", lambda L, x: (x * 1).index_reduce_(-1, L.tensor([0, 0]), x[..., :2].exp(), "amin")),
    ("put", lambda L, x: L.put(x, L.tensor([-1, 0, 5]), x[0, 0, :3] * 2)),
    ("put accumulate", lambda L, x: x.put(L.tensor([[1, 1], [7, 23]]), x[1, :2, :2] ** 2, True)),
    ("put_", lambda L, x: (x * 1).put_(L.tensor([2]), x[1, 1, 1:2].sin())),
]


def _total(out, lib):
    outs = out if isinstance(out, (tuple, list)) else [out]
    flat = [o for v in outs for o in (v if isinstance(v, (tuple, list)) else [v])]
    return sum(((o * (k + 1.5)) ** 2).sum() for k, o in enumerate(flat))


@COMPILED
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients(name, fn, compiled):
    check(fn, X, compiled=compiled)
    got, want = gradients(lambda L, x: _total(fn(L, x), L), X, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@COMPILED
def test_fill_diagonal(compiled):
    check(lambda L, x: x.clone().fill_diagonal_(5.0), M, compiled=compiled)
    check(lambda L, x: x.t().clone().fill_diagonal_(-1), M, compiled=compiled)
    check(lambda L, x: L.ones(7, 3).fill_diagonal_(2, wrap=True), M, compiled=compiled)
    check(lambda L, x: L.ones(7, 3).fill_diagonal_(2), M, compiled=compiled)
    check(lambda L, x: L.zeros(3, 3, 3).fill_diagonal_(1), M, compiled=compiled)
    got, want = gradients(lambda L, x: (x * 1).fill_diagonal_(0.5).pow(2).sum(), M, compiled)
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("call", [
    lambda L: L.ones(5).unfold(0, 7, 1), lambda L: L.ones(5).unfold(0, 2, 0), lambda L: L.ones(5).unfold(1, 2, 1),
    lambda L: L.ones(2, 3).sum_to_size(3, 3), lambda L: L.ones(2, 3).sum_to_size(1, 2, 3),
    lambda L: L.ones(3).fill_diagonal_(1), lambda L: L.ones(2, 3, 4).fill_diagonal_(1), lambda L: L.ones(3).H,
    lambda L: L.ones(2, 2, 2).H, lambda L: L.ones(3).mH, lambda L: L.ones(2, 3).slice_scatter(L.ones(1, 3)),
    lambda L: L.ones(2, 3).select_scatter(L.ones(2), 0, 0), lambda L: L.ones(3, 3).diagonal_scatter(L.ones(2)),
    lambda L: L.ones(3, 2).index_reduce(0, L.tensor([0]), L.ones(1, 2), "sum"),
])
def test_errors_as_torch(call):
    with pytest.raises(Exception) as theirs:
        call(torch)
    with pytest.raises((type(theirs.value), flame.FlameError)):
        call(flame)


def test_sizes_and_real():
    x = flame.ones(2, 3, dtype=flame.float16)
    t = torch.ones(2, 3, dtype=torch.float16)
    assert (x.nbytes, x.itemsize, x.ndimension()) == (t.nbytes, t.itemsize, t.ndimension())
    assert x.is_cpu == t.is_cpu and x.new_empty_strided((3, 2), (1, 3)).shape == (3, 2)
    assert x.new_empty_strided((3, 2), (1, 3)).dtype == flame.float16
    assert flame.tensor(2.0).unfold(0, 1, 1).shape == torch.tensor(2.0).unfold(0, 1, 1).shape
    check(lambda L, a: L.isreal(a), np.array([1.0, np.nan, np.inf]), compiled=False)
    check(lambda L, a: L.isreal(a), np.array([1.0, np.nan, np.inf]), compiled=True)
    check(lambda L, a: a.reshape(3, 1).isreal(), np.array([1.0, np.nan, np.inf]), compiled=True)


UNFOLD_WRITES = {
    "fill_": lambda y: y.fill_(9.0),
    "item assignment": lambda y: y.__setitem__(0, 5.0),
    "into a view of it": lambda y: y[1].mul_(2.0),
}


@pytest.mark.parametrize("write", UNFOLD_WRITES.values(), ids=UNFOLD_WRITES.keys())
def test_a_write_into_unfolds_result_reaches_the_input_as_torch(write):
    """torch's Tensor.unfold is a view: a write into it (or a view of it) changes the input, eagerly
    and inside @flame.compile."""
    x = np.arange(12.0).reshape(3, 4)
    want = torch.tensor(x)
    write(want.unfold(1, 2, 2))
    got = flame.tensor(x)
    write(got.unfold(1, 2, 2))
    np.testing.assert_array_equal(got.numpy(), want.numpy())

    @flame.compile
    def step(x):
        write(x.unfold(1, 2, 2))
        return x * 1

    np.testing.assert_array_equal(step(flame.tensor(x)).numpy(), want.numpy())


def test_asarray_and_empty_strided():
    a = np.array([1.0, 2.0])
    assert flame.asarray(a).dtype == flame.float64 and flame.asarray([1, 2]).dtype == flame.int64
    assert flame.asarray([1.5], dtype=flame.float16).dtype == flame.float16
    x = flame.tensor([1.0, 2.0])
    assert flame.asarray(x) is x or np.shares_memory(flame.asarray(x).numpy(), x.numpy())
    y = flame.asarray(x, copy=True)
    y.add_(1)
    assert x.numpy().tolist() == [1.0, 2.0]
    assert flame.asarray([1.0], requires_grad=True).requires_grad
    e = flame.empty_strided((2, 3), (1, 2), dtype=flame.float64)
    assert e.shape == (2, 3) and e.dtype == flame.float64


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_finfo(name):
    mine, theirs = flame.finfo(getattr(flame, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(mine, attr) == getattr(theirs, attr), attr
    assert flame.finfo(getattr(flame, name)) == mine


@pytest.mark.parametrize("name", ["int64", "int32", "int8", "uint8"])
def test_iinfo(name):
    mine, theirs = flame.iinfo(getattr(flame, name)), torch.iinfo(getattr(torch, name))
    for attr in ("bits", "max", "min", "dtype"):
        assert getattr(mine, attr) == getattr(theirs, attr), attr


def test_info_defaults_and_errors():
    assert flame.finfo().dtype == torch.finfo().dtype == "float32"
    for lib in (torch, flame):
        with pytest.raises(TypeError):
            lib.finfo(lib.int64)
        with pytest.raises(TypeError):
            lib.iinfo(lib.float32)
        with pytest.raises(TypeError):
            lib.iinfo(lib.bool)
    assert isinstance(flame.ones(1).dtype, flame.dtype) and isinstance(flame.float16, flame.dtype)


def test_view_of_a_dtype():
    """view(dtype) of the tensor's own dtype is a view of it, as torch's; another dtype (a reinterpretation
    of the bytes, which flame has not) raises a DTypeError naming .to, not a TypeError from int()."""
    x = flame.zeros(2, 3)
    assert x.view(flame.float32)._base is x and x.view(flame.float32).shape == (2, 3)
    with pytest.raises(flame.errors.DTypeError, match="does not reinterpret"):
        x.view(flame.int32)
