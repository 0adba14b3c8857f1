"""Eager flame.Tensor ops against NumPy: arithmetic with PyTorch-style promotion and Python scalars,
reductions, movement, indexing (negative steps, None, Ellipsis, ints), cat/stack/pad/flip/where/triu,
and zero-size dimensions."""

from __future__ import annotations

import numpy as np
import pytest

import flame

RNG = np.random.default_rng(1234)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((2, 3, 4)).astype(np.float32)
INTS = RNG.integers(-5, 6, (3, 4)).astype(np.int32)


def _np(t: flame.Tensor) -> np.ndarray:
    assert isinstance(t, flame.Tensor)
    return t.numpy()


def _same(t: flame.Tensor, want, dtype: str | None = None, tol: float = 1e-6) -> None:
    got = _np(t)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    if dtype is not None:
        assert t.dtype.name == dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "pow"])
def test_arithmetic_with_broadcasting(op: str) -> None:
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide, "pow": np.power}[op]
    a = np.abs(A) + 0.5
    b = RNG.standard_normal((4,)).astype(np.float32)
    got = getattr(flame.tensor(a), f"__{op}__")(flame.tensor(b))
    _same(got, fn(a.astype(np.float64), b), "f32", 1e-5)


@pytest.mark.parametrize("left, right, want", [
    ("i32", "f16", "f16"), ("i32", "i64", "i64"), ("f16", "f32", "f32"), ("bool", "i32", "i32"),
    ("bf16", "f16", "f32"), ("f32", "f64", "f64"),
])
def test_tensor_tensor_promotion(left: str, right: str, want: str) -> None:
    a = flame.tensor(np.ones((2,)), dtype=left)
    b = flame.tensor(np.full((2,), 3), dtype=right)
    out = a * b
    assert out.dtype.name == want
    _same(out, [3.0, 3.0])


def test_python_scalars_follow_torch() -> None:
    i = flame.tensor(INTS)
    assert (i + 1).dtype.name == "i32"
    _same(i + 1, INTS + 1)
    _same(i * 1.5, INTS * 1.5, "f32")
    _same(2 - i, 2 - INTS, "i32")
    _same(i / 2, INTS / 2, "f32")
    _same(1.0 / (flame.tensor(A) + 10), 1.0 / (A.astype(np.float64) + 10), "f32")
    b = flame.tensor([True, False])
    _same(b + 1, [2, 1], "i64")
    _same(flame.tensor(A) ** 2, A.astype(np.float64) ** 2, "f32", 1e-5)
    _same(-flame.tensor(INTS), -INTS, "i32")
    _same(abs(flame.tensor(INTS)), np.abs(INTS), "i32")


def test_comparisons_and_logic() -> None:
    a, i = flame.tensor(A), flame.tensor(INTS)
    _same(a > 0, A > 0, "bool")
    _same(i == 2, INTS == 2, "bool")
    _same((a > 0) & (i < 0), (A > 0) & (INTS < 0), "bool")
    _same(~(a > 0) | (i > 3), ~(A > 0) | (INTS > 3), "bool")
    _same(i < 1.5, INTS < 1.5, "bool")


def test_creation_defaults_follow_torch() -> None:
    assert flame.tensor([1.0, 2.0]).dtype.name == "f32"
    assert flame.tensor([1, 2]).dtype.name == "i64"
    assert flame.tensor(np.ones(2, np.float16)).dtype.name == "f16"
    _same(flame.arange(5), np.arange(5), "i64")
    _same(flame.arange(1, 2, 0.25), np.arange(1, 2, 0.25), "f32")
    _same(flame.zeros(2, 3), np.zeros((2, 3)), "f32")
    _same(flame.ones((2,), dtype="f64"), np.ones(2), "f64")
    _same(flame.full((2, 2), 7), np.full((2, 2), 7), "i64")


@pytest.mark.parametrize("dim, keepdim", [(None, False), (0, False), (1, True), (-1, False), ((0, 1), True)])
def test_sum_mean(dim, keepdim) -> None:
    a = flame.tensor(A)
    ax = dim if dim is not None else None
    _same(a.sum(dim, keepdim=keepdim) if dim is not None else a.sum(), A.astype(np.float64).sum(ax, keepdims=keepdim),
          "f32", 1e-5)
    _same(a.mean(dim, keepdim=keepdim) if dim is not None else a.mean(),
          A.astype(np.float64).mean(ax, keepdims=keepdim), "f32", 1e-5)


def test_integer_and_bool_reductions() -> None:
    _same(flame.tensor(INTS).sum(), INTS.sum())
    _same(flame.tensor(INTS).mean(1, dtype=flame.f32), INTS.mean(1), "f32")
    with pytest.raises(flame.DTypeError, match="mean"):  # torch: an integer mean needs a floating dtype
        flame.tensor(INTS).mean(1)
    _same(flame.tensor(A > 0).sum(0), (A > 0).sum(0), "i64")


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_with_dim_return_values_and_indices(dim: int, keepdim: bool) -> None:
    a = flame.tensor(A)
    values, indices = a.max(dim, keepdim=keepdim)
    _same(values, A.max(dim, keepdims=keepdim), "f32")
    _same(indices, np.expand_dims(A.argmax(dim), dim) if keepdim else A.argmax(dim), "i64")
    low = a.min(dim, keepdim=keepdim)
    _same(low.values, A.min(dim, keepdims=keepdim))
    _same(low.indices, np.expand_dims(A.argmin(dim), dim) if keepdim else A.argmin(dim))
    _same(a.argmax(dim, keepdim=keepdim), np.expand_dims(A.argmax(dim), dim) if keepdim else A.argmax(dim))


def test_whole_tensor_max_argmax() -> None:
    a = flame.tensor(B)
    _same(a.max(), B.max())
    _same(a.argmax(), B.argmax(), "i64")
    _same(a.amin((0, 2)), B.min((0, 2)))


def test_zero_d_tensor_reduces_over_dim_0_and_minus_1() -> None:
    s = flame.tensor(5.0)
    _same(s.sum(0), 5.0)
    _same(s.sum(-1), 5.0)
    _same(s.argmax(-1), 0)


def test_movement() -> None:
    a, b = flame.tensor(A), flame.tensor(B)
    _same(a.reshape(2, 6), A.reshape(2, 6))
    _same(a.reshape(-1), A.reshape(-1))
    _same(b.view(4, -1), B.reshape(4, -1))
    _same(b.permute(2, 0, 1), B.transpose(2, 0, 1))
    _same(a.T, A.T)
    _same(b.transpose(0, 2), B.swapaxes(0, 2))
    _same(b.mT, B.swapaxes(-1, -2))
    _same(b.flatten(1), B.reshape(2, 12))
    _same(a.unsqueeze(1), A[:, None])
    _same(a.unsqueeze(-1), A[..., None])
    _same(a.unsqueeze(0).squeeze(), A)
    _same(a[:, :1].expand(3, 5), np.broadcast_to(A[:, :1], (3, 5)))


@pytest.mark.parametrize("key", [
    (slice(None, None, -1),), (slice(None, None, -1), slice(None, None, -2)), (slice(2, 0, -1), slice(-1, 0, -3)),
    (slice(-1, None, -2),), (slice(3, 1),), (slice(0, 2, -1),), (1,), (-1, -2), (None, Ellipsis, 1),
    (Ellipsis, 0, None), (slice(1, 2), None), (0, slice(None, None, 2), None, slice(3, None)), (Ellipsis,),
    (None,), (Ellipsis, slice(None, None, -3)), (slice(-100, 100),), (1, Ellipsis, -1),
])
def test_getitem_matches_numpy(key) -> None:
    _same(flame.tensor(B)[key], B[key])


def test_getitem_with_index_tensor() -> None:
    idx = np.array([2, 0, 2])
    _same(flame.tensor(A)[flame.tensor(idx)], A[idx])
    _same(flame.tensor(B)[:, flame.tensor(idx)], B[:, idx])
    _same(flame.tensor(B)[..., flame.tensor(np.array([3, 0]))], B[..., [3, 0]])


def test_getitem_out_of_range_is_a_shape_error() -> None:
    with pytest.raises(flame.ShapeError, match="out of bounds"):
        flame.tensor(A)[3]
    with pytest.raises(flame.ShapeError, match="too many indices"):
        flame.tensor(A)[0, 0, 0]


def test_cat_stack_pad_flip_where_triu() -> None:
    a = flame.tensor(A)
    _same(flame.cat([a, a * 2], 0), np.concatenate([A, A * 2], 0))
    _same(flame.cat([a, a[:, :1]], -1), np.concatenate([A, A[:, :1]], -1))
    _same(flame.stack([a, a + 1], 1), np.stack([A, A + 1], 1))
    _same(flame.stack([a, a + 1], -1), np.stack([A, A + 1], -1))
    _same(flame.pad(a, [(1, 0), (2, 3)], value=-1.0), np.pad(A, [(1, 0), (2, 3)], constant_values=-1.0))
    _same(a.flip(0, 1), A[::-1, ::-1])
    _same(flame.flip(a, -1), A[:, ::-1])
    _same(flame.where(a > 0, a, 0.0), np.where(A > 0, A, 0.0), "f32")
    _same(flame.where(a > 0, 1, flame.tensor(INTS)), np.where(A > 0, 1, INTS))
    _same(a.triu(), np.triu(A))
    _same(flame.triu(a, 1), np.triu(A, 1))
    _same(a.tril(-1), np.tril(A, -1))


def test_unary_math_promotes_integers() -> None:
    i = flame.tensor(np.abs(INTS) + 1)
    _same(i.sqrt(), np.sqrt(np.abs(INTS) + 1.0), "f32")
    _same(i.exp(), np.exp(np.abs(INTS) + 1.0), "f32", 1e-5)
    _same(flame.tensor(A).relu(), np.maximum(A, 0), "f32")
    _same(flame.tensor(INTS).relu(), np.maximum(INTS, 0), "i32")
    _same(flame.tensor(A).clamp(-0.5, 0.5), np.clip(A, -0.5, 0.5))


def test_softmax_and_var() -> None:
    a = flame.tensor(A)
    e = np.exp(A - A.max(1, keepdims=True))
    _same(a.softmax(1), e / e.sum(1, keepdims=True), tol=1e-6)
    _same(a.var(1), A.astype(np.float64).var(1, ddof=1), tol=1e-5)
    _same(a.std(), A.astype(np.float64).std(ddof=1), tol=1e-5)


def test_matmul_shapes_like_numpy() -> None:
    v = RNG.standard_normal(4).astype(np.float32)
    w = RNG.standard_normal((4, 5)).astype(np.float32)
    _same(flame.tensor(A) @ flame.tensor(w), A @ w, tol=1e-5)
    _same(flame.tensor(A) @ flame.tensor(v), A @ v, tol=1e-5)
    _same(flame.tensor(v) @ flame.tensor(w), v @ w, tol=1e-5)
    _same(flame.tensor(v) @ flame.tensor(v), v @ v, tol=1e-5)
    _same(flame.tensor(B) @ flame.tensor(w), B @ w, tol=1e-5)


def test_zero_size_dims_behave_like_numpy() -> None:
    z = np.zeros((0, 3), np.float32)
    t = flame.tensor(z)
    _same(t + 1, z + 1)
    _same(t.sum(0), z.sum(0))
    _same(t.sum(1), z.sum(1))
    _same(t.sum(), z.sum())
    _same(t.T, z.T)
    _same(t.reshape(3, 0), z.reshape(3, 0))
    _same(t[:, 1], z[:, 1])
    _same(flame.cat([t, flame.tensor(A[:, :3])], 0), np.concatenate([z, A[:, :3]], 0))
    _same(flame.tensor(A)[2:2], A[2:2])
    _same(flame.tensor(A)[:, 4:], A[:, 4:])
    _same(t @ flame.tensor(np.ones((3, 2), np.float32)), z @ np.ones((3, 2)))
    _same(flame.tensor(np.ones((2, 0), np.float32)) @ flame.tensor(np.ones((0, 3), np.float32)), np.zeros((2, 3)))
    _same(flame.zeros(2, 0) * 3, np.zeros((2, 0)))
    assert flame.tensor(z).numel() == 0 and len(flame.tensor(z)) == 0


def test_item_tolist_and_bool() -> None:
    s = flame.tensor(A).sum()
    assert s.item() == pytest.approx(float(A.astype(np.float64).sum()), rel=1e-5)
    assert flame.tensor(INTS).tolist() == INTS.tolist()
    assert bool(flame.tensor(1.0) > 0) is True
    with pytest.raises(flame.ShapeError, match="one element"):
        flame.tensor(A).item()
