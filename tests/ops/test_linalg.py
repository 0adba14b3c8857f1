"""flame.linalg's norms and products against torch.linalg in float64 on random shapes: values and
gradients, eagerly and inside @flame.compile (tests/ops/test_everyday_ops.py's check), multi_dot's
multiplication order (the fewest multiply-adds), and torch's errors: the same exception types, and
NotImplementedError / AttributeError where flame lacks the SVD, the inverse or a factorisation."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import flame
from flame.frontend import linalg_functions
from tests.ops.test_everyday_ops import MODES, _rng, check

INF = float("inf")


def rand64(*shape, key=0) -> np.ndarray:
    return _rng("linalg", shape, key).standard_normal(shape)


def _batch(rng: random.Random, lo: int = 0, hi: int = 2) -> tuple[int, ...]:
    return tuple(rng.randint(1, 3) for _ in range(rng.randint(lo, hi)))


# ---- matrix and vector norms ------------------------------------------------------------------------------

MATRIX_ORDS = ("fro", 1, -1, INF, -INF)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ord", MATRIX_ORDS, ids=str)
@pytest.mark.parametrize("seed", range(3))
def test_matrix_norm(ord, seed, mode):  # noqa: A002
    rng = random.Random(seed)
    shape = (*_batch(rng), rng.randint(1, 5), rng.randint(1, 5))
    x = rand64(*shape, key=seed)
    dims = rng.choice([(-2, -1), (-1, -2), (0, len(shape) - 1), (len(shape) - 1, 0)])
    keep = rng.random() < 0.5
    check(lambda t: flame.linalg.matrix_norm(t, ord, dims, keep),
          lambda t: torch.linalg.matrix_norm(t, ord, dims, keep), x, mode=mode, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ord", ("fro", 1, INF), ids=str)
def test_matrix_norm_of_empty_matrices(ord, mode):  # noqa: A002
    """A norm over a zero-size dim is 0, as torch's (the largest of no column sums included)."""
    for shape in ((0, 3), (3, 0), (2, 0, 0)):
        check(lambda t: flame.linalg.matrix_norm(t, ord, keepdim=True),
              lambda t: torch.linalg.matrix_norm(t, ord, keepdim=True), np.zeros(shape), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ord", (None, 2, 1, INF, -INF, 3, 0.5, 0, "fro", -1), ids=str)
def test_linalg_norm(ord, mode):  # noqa: A002
    """linalg.norm: a vector norm over one dim or of a 1-D input, a matrix norm over two dims or of a
    2-D input where ord is given; ord=None is the 2-norm of the entries whatever the rank."""
    x, v = rand64(3, 4, 2), rand64(5, key=1)
    vector = not isinstance(ord, str)
    matrix = ord in MATRIX_ORDS or ord is None
    cases = []
    if vector:
        cases.append((lambda t: flame.linalg.norm(t, ord, dim=1), lambda t: torch.linalg.norm(t, ord, dim=1)))
    if matrix:
        cases.append((lambda t: flame.linalg.norm(t[:, :, 0], ord), lambda t: torch.linalg.norm(t[:, :, 0], ord)))
        cases.append((lambda t: flame.linalg.norm(t, ord, (2, 0), True),
                      lambda t: torch.linalg.norm(t, ord, (2, 0), True)))
    for fn, tfn in cases:
        check(fn, tfn, x, mode=mode, rtol=1e-12, atol=1e-12)
    if vector:
        check(lambda t: flame.linalg.norm(t, ord), lambda t: torch.linalg.norm(t, ord), v, mode=mode, rtol=1e-12)
    check(lambda t: flame.linalg.norm(t), lambda t: torch.linalg.norm(t), x, mode=mode, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_norm_dtype(mode):
    """dtype= computes in that dtype, as torch's (f32 in, f64 out)."""
    x = rand64(3, 4).astype(np.float32)
    check(lambda t: flame.linalg.matrix_norm(t, 1, dtype=flame.float64),
          lambda t: torch.linalg.matrix_norm(t, 1, dtype=torch.float64), x, mode=mode, rtol=1e-12)
    check(lambda t: flame.linalg.norm(t, "fro", dtype=flame.float64),
          lambda t: torch.linalg.norm(t, "fro", dtype=torch.float64), x, mode=mode, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", ("fro", 2, 1, INF, 3, None), ids=str)
def test_torch_norm_agrees_with_linalg(p, mode):
    """torch.norm and Tensor.norm: vector norms for numbers, 'fro' over up to two dims."""
    x = rand64(2, 3, 4)
    for dim in (None, 1, (0, 2)):
        check(lambda t, d=dim: flame.norm(t, p, d), lambda t, d=dim: torch.norm(t, p, d), x, mode=mode, rtol=1e-12)
        check(lambda t, d=dim: t.norm(p, d, True), lambda t, d=dim: t.norm(p, d, True), x, mode=mode, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", (INF, -INF, 0.5, -1, 2), ids=str)
def test_norm_over_the_empty_dim_tuple_reduces_every_dim(p, mode):
    """dim=() reduces every dim, as dim=None (torch's convention): the inf, -inf and p < 1 norms too, whose
    gradients put the reduced dims back (they raised a ShapeError), with keepdim and without."""
    x = rand64(2, 3)
    x[0, 1] = 0.0
    for keep in (False, True):
        check(lambda t, k=keep: t.norm(p, (), k), lambda t, k=keep: t.norm(p, (), k), x, mode=mode, rtol=1e-12)
        check(lambda t, k=keep: flame.linalg.vector_norm(t, p, (), k),
              lambda t, k=keep: torch.linalg.vector_norm(t, p, (), k), x, mode=mode, rtol=1e-12)


# ---- products -----------------------------------------------------------------------------------------------


def _chain(seed: int) -> list[np.ndarray]:
    """2 to 6 matrices of random sizes that multiply, the first and last 1-D now and then."""
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    p = [rng.choice([1, 2, 3, 5, 8]) for _ in range(n + 1)]
    arrays = [rand64(p[i], p[i + 1], key=(seed, i)) for i in range(n)]
    if rng.random() < 0.3:
        arrays[0] = arrays[0][0]
    if rng.random() < 0.3:
        arrays[-1] = arrays[-1][:, 0]
    return arrays


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(6))
def test_multi_dot(seed, mode):
    arrays = _chain(seed)
    check(lambda *ts: flame.linalg.multi_dot(ts), lambda *ts: torch.linalg.multi_dot(list(ts)), *arrays, mode=mode,
          rtol=1e-12, atol=1e-12)


def _cheapest(p: list[int]) -> int:
    """The fewest multiply-adds of any parenthesisation of matrices i of p[i] x p[i + 1] (every split)."""
    def best(i, j):
        return 0 if i == j else min(best(i, k) + best(k + 1, j) + p[i] * p[k + 1] * p[j + 1] for k in range(i, j))
    return best(0, len(p) - 2)


@pytest.mark.parametrize("p", [(10, 100, 5, 50), (50, 5, 100, 10), (3, 7, 2, 9, 4, 6), (1, 8, 8, 8, 1),
                               (30, 35, 15, 5, 10, 20, 25), (4, 4, 4, 4), (2, 9, 1, 9, 2)])
def test_multi_dot_takes_the_cheapest_order(p, monkeypatch):
    """The products multi_dot makes cost the fewest multiply-adds (torch's matrix_chain_order), as counted
    from the shapes it multiplies."""
    done = []
    real = linalg_functions.matmul

    def counted(a, b):
        done.append(a.shape[0] * a.shape[1] * b.shape[1])
        return real(a, b)

    monkeypatch.setattr(linalg_functions, "matmul", counted)
    mats = [flame.tensor(rand64(p[i], p[i + 1], key=i)) for i in range(len(p) - 1)]
    flame.linalg.multi_dot(mats)
    assert len(done) == len(mats) - 1 and sum(done) == _cheapest(list(p))


def test_chain_matmul_takes_multi_dots_order():
    a, b, c = (flame.tensor(rand64(*s, key=i)) for i, s in enumerate([(10, 100), (100, 5), (5, 50)]))
    with pytest.warns(UserWarning, match="chain_matmul is deprecated"):
        got = flame.chain_matmul(a, b, c)
    np.testing.assert_allclose(got.numpy(), ((a @ b) @ c).numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_vecdot_matmul_diagonal(mode):
    x, y = rand64(2, 3, 4), rand64(3, 1, key=1)
    check(lambda a, b: flame.linalg.vecdot(a, b), lambda a, b: torch.linalg.vecdot(a, b), x, rand64(4, key=2),
          mode=mode, rtol=1e-12)
    check(lambda a, b: flame.linalg.vecdot(a, b, dim=-2), lambda a, b: torch.linalg.vecdot(a, b, dim=-2), x, y,
          mode=mode, rtol=1e-12)
    check(lambda a, b: flame.linalg.matmul(a, b), lambda a, b: torch.linalg.matmul(a, b), x, rand64(4, 2, key=3),
          mode=mode, rtol=1e-12)
    for offset in (-1, 0, 2):
        check(lambda a, o=offset: flame.linalg.diagonal(a, offset=o),
              lambda a, o=offset: torch.linalg.diagonal(a, offset=o), x, mode=mode)
    check(lambda a: flame.linalg.diagonal(a, dim1=0, dim2=2), lambda a: torch.linalg.diagonal(a, dim1=0, dim2=2), x,
          mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6, 7, 12, 13])
def test_matrix_power(n, mode):
    """torch's products (repeated squaring past 3); n=0 the identity with a zero gradient."""
    rng = random.Random(n)
    m = rng.randint(1, 4)
    x = rand64(*_batch(rng, 0, 2), m, m, key=n) * 0.6
    check(lambda a: flame.linalg.matrix_power(a, n), lambda a: torch.linalg.matrix_power(a, n), x, mode=mode,
          rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_torch_matrix_power_and_the_method(mode):
    x = rand64(2, 3, 3) * 0.6
    check(lambda a: flame.matrix_power(a, 5), lambda a: torch.matrix_power(a, 5), x, mode=mode, rtol=1e-12)
    check(lambda a: a.matrix_power(4), lambda a: a.matrix_power(4), x, mode=mode, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_vander(mode):
    x = rand64(2, 3)
    check(lambda a: flame.linalg.vander(a), lambda a: torch.linalg.vander(a), x, mode=mode, rtol=1e-12)
    check(lambda a: flame.linalg.vander(a, N=5), lambda a: torch.linalg.vander(a, N=5), x[0], mode=mode, rtol=1e-12)
    zeros = np.array([0.0, 2.0, -1.5, 0.0])  # cumprod's gradient through zeros
    check(lambda a: flame.linalg.vander(a), lambda a: torch.linalg.vander(a), zeros, mode=mode, rtol=1e-12)
    for ints in (np.arange(-2, 3), np.arange(4, dtype=np.int32), np.arange(3, dtype=np.uint8)):
        check(lambda a: flame.linalg.vander(a, N=4), lambda a: torch.linalg.vander(a, N=4), ints, mode=mode)


# ---- errors ---------------------------------------------------------------------------------------------------

A, V, S = rand64(3, 4), rand64(4, key=1), rand64(3, 3, key=2)
ERRORS = {  # torch raises; flame raises the same type with torch's message (where `same`)
    "matrix_norm ord 3": (lambda L, a: L.linalg.matrix_norm(a, 3), A, True),
    "matrix_norm ord 0.5": (lambda L, a: L.linalg.matrix_norm(a, 0.5), A, True),
    "matrix_norm ord abc": (lambda L, a: L.linalg.matrix_norm(a, "abc"), A, True),
    "matrix_norm 1-D": (lambda L, a: L.linalg.matrix_norm(a), V, True),
    "matrix_norm one dim": (lambda L, a: L.linalg.matrix_norm(a, dim=(0,)), A, True),
    "matrix_norm same dims": (lambda L, a: L.linalg.matrix_norm(a, 1, dim=(1, -1)), A, True),
    "matrix_norm dim out of range": (lambda L, a: L.linalg.matrix_norm(a, dim=(0, 2)), A, False),
    "matrix_norm integer": (lambda L, a: L.linalg.matrix_norm(a.long()), A, True),
    "matrix_norm narrowing dtype": (lambda L, a: L.linalg.matrix_norm(a, dtype=L.float32), A, True),
    "matrix_norm integer dtype": (lambda L, a: L.linalg.matrix_norm(a, 1, dtype=L.int32), A, True),
    "norm 3 dims": (lambda L, a: L.linalg.norm(a, dim=(0, 1, 1)), A, True),
    "norm ord of 3-D": (lambda L, a: L.linalg.norm(a[None], 1), A, True),
    "norm fro over one dim": (lambda L, a: L.linalg.norm(a, "fro", dim=1), A, True),
    "norm 2-D ord 3": (lambda L, a: L.linalg.norm(a, 3), A, True),
    "torch.norm fro over 3 dims": (lambda L, a: L.norm(a[None], "fro", dim=(0, 1, 2)), A, True),
    "Tensor.norm bad string": (lambda L, a: a.norm("abc"), A, True),
    "vector_norm integer": (lambda L, a: L.linalg.vector_norm(a.long(), dtype=L.float64), A, True),
    "vector_norm narrowing dtype": (lambda L, a: L.linalg.vector_norm(a, dtype=L.float32), A, True),
    "multi_dot one": (lambda L, a: L.linalg.multi_dot([a]), A, True),
    "multi_dot none": (lambda L, a: L.linalg.multi_dot([]), A, True),
    "multi_dot 3-D first": (lambda L, a: L.linalg.multi_dot([a[None], a.mT]), A, True),
    "multi_dot 3-D middle": (lambda L, a: L.linalg.multi_dot([a, a.mT[None], a]), A, True),
    "multi_dot shapes": (lambda L, a: L.linalg.multi_dot([a, a]), A, True),
    "multi_dot dtypes": (lambda L, a: L.linalg.multi_dot([a, a.mT.float()]), A, True),
    "vecdot integer": (lambda L, a: L.linalg.vecdot(a.long(), a.long()), A, True),
    "vecdot dtypes": (lambda L, a: L.linalg.vecdot(a, a.float()), A, True),
    "vecdot shapes": (lambda L, a: L.linalg.vecdot(a, a[:, :3]), A, False),
    "vecdot dim": (lambda L, a: L.linalg.vecdot(a, a, dim=2), A, False),
    "matrix_power not square": (lambda L, a: L.linalg.matrix_power(a, 2), A, True),
    "matrix_power 1-D": (lambda L, a: L.linalg.matrix_power(a, 2), V, True),
    "matrix_power float n": (lambda L, a: L.linalg.matrix_power(a, 2.0), S, False),
    "matrix_power integer negative n": (lambda L, a: L.linalg.matrix_power(a.long(), -1), S, False),
    "vander bool": (lambda L, a: L.linalg.vander(a > 0), V, True),
    "vander half": (lambda L, a: L.linalg.vander(a.half()), V, True),
    "vander N=1": (lambda L, a: L.linalg.vander(a, N=1), V, True),
    "vander 0-d": (lambda L, a: L.linalg.vander(a[0]), V, True),
    "diagonal of 1-D": (lambda L, a: L.linalg.diagonal(a), V, False),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_as_torch(name):
    fn, x, same = ERRORS[name]
    with pytest.raises(Exception) as want:
        fn(torch, torch.tensor(x))
    with pytest.raises(type(want.value)) as got:
        fn(flame, flame.tensor(x))
    assert isinstance(got.value, flame.FlameError)
    if same:
        assert str(got.value).split("\n")[0] == str(want.value).split("\n")[0]


@pytest.mark.parametrize("ord", ["nuc", 2, -2], ids=str)
def test_norms_of_singular_values_say_flame_has_no_svd(ord):  # noqa: A002
    x = flame.tensor(A)
    for call in (lambda: flame.linalg.matrix_norm(x, ord), lambda: flame.linalg.norm(x, ord),
                 lambda: flame.norm(x, ord) if ord == "nuc" else flame.linalg.norm(x, ord, (0, 1))):
        with pytest.raises(NotImplementedError, match=f"ord={ord!r} needs the singular values.*no SVD"):
            call()
    with pytest.raises(RuntimeError, match="dims must be different"):  # torch's argument checks come first
        torch.linalg.matrix_norm(torch.tensor(A), ord, dim=(0, 0))
    with pytest.raises(flame.ShapeError, match="dims must be different"):
        flame.linalg.matrix_norm(x, ord, dim=(0, 0))


def test_negative_powers_say_flame_has_no_inverse():
    with pytest.raises(NotImplementedError, match=r"n=-2 needs the inverse of A .*no matrix inverse"):
        flame.linalg.matrix_power(flame.tensor(S), -2)


@pytest.mark.parametrize("name", ["inv", "solve", "cholesky", "qr", "svd", "svdvals", "det", "slogdet", "eigh",
                                  "eig", "lstsq", "pinv"])
def test_missing_functions_point_to_the_docs(name):
    """torch.linalg functions flame lacks raise AttributeError naming the page that says what to write
    instead, as flame's package root does for a missing torch name."""
    assert hasattr(torch.linalg, name)
    with pytest.raises(AttributeError, match=f"no attribute '{name}'.*docs/coming_from_pytorch.md"):
        getattr(flame.linalg, name)


def test_exports():
    assert set(flame.linalg.__all__) >= {"norm", "matrix_norm", "vector_norm", "multi_dot", "vecdot", "matmul",
                                         "diagonal", "matrix_power", "vander", "cross"}
    assert all(callable(getattr(flame.linalg, n)) for n in flame.linalg.__all__)
