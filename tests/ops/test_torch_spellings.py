"""PyTorch's other spellings of everyday ops (torch.add/mul/div, eq/lt/..., mm/bmm/dot/outer/addmm,
logsumexp, lerp/addcmul/addcdiv, select/unbind/roll/movedim/t, torch.max/min, the function forms of
Tensor methods) against torch on the CPU: values and gradients, eagerly and inside @flame.compile
(the check of test_everyday_ops), and their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import MODES, check, randn


@pytest.mark.parametrize("mode", MODES)
def test_arithmetic_spellings(mode):
    a, b = randn(3, 4), randn(3, 4, key=1)
    check(lambda x, y: flame.add(x, y, alpha=2.5), lambda x, y: torch.add(x, y, alpha=2.5), a, b, mode=mode)
    check(lambda x, y: x.sub(y, alpha=-0.5), lambda x, y: x.sub(y, alpha=-0.5), a, b, mode=mode)
    check(lambda x, y: flame.mul(x, y).true_divide(y * y + 1), lambda x, y: torch.mul(x, y).true_divide(y * y + 1),
          a, b, mode=mode)
    check(lambda x, y: flame.div(x, y * y + 1), lambda x, y: torch.div(x, y * y + 1), a, b, mode=mode)
    check(lambda x: x.div(0.7, rounding_mode="floor"), lambda x: x.div(0.7, rounding_mode="floor"), a * 3,
          mode=mode, wrt=[])
    check(lambda x: x.div(0.7, rounding_mode="trunc"), lambda x: x.div(0.7, rounding_mode="trunc"), a * 3,
          mode=mode, wrt=[])


def test_integer_division_rounding_modes():
    n = np.array([-7, -6, -1, 0, 1, 6, 7], np.int64)
    for d in (2, -2, 3):
        for mode in ("trunc", "floor"):
            got = flame.div(flame.tensor(n), d, rounding_mode=mode)
            want = torch.div(torch.tensor(n), d, rounding_mode=mode)
            assert got.dtype == flame.int64
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    got = flame.tensor(n).div(flame.tensor(np.array([2, -2, 3, 4, -3, 5, -5])), rounding_mode="trunc")
    want = torch.tensor(n).div(torch.tensor([2, -2, 3, 4, -3, 5, -5]), rounding_mode="trunc")
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(ValueError, match="rounding_mode"):
        flame.div(flame.tensor(n), 2, rounding_mode="round")


@pytest.mark.parametrize("mode", MODES)
def test_comparisons_and_logic(mode):
    a, b = randn(3, 4), randn(3, 4, key=1)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        check(lambda x, y, n=name: getattr(flame, n)(x, y.where(y > 0, x)),
              lambda x, y, n=name: getattr(torch, n)(x, y.where(y > 0, x)), a, b, mode=mode, wrt=[])
        check(lambda x, n=name: getattr(x, n)(0.25), lambda x, n=name: getattr(x, n)(0.25), a, mode=mode, wrt=[])
    check(lambda x, y: flame.logical_and(x > 0, y), lambda x, y: torch.logical_and(x > 0, y), a, np.round(b),
          mode=mode, wrt=[])
    check(lambda x, y: x.logical_or(y), lambda x, y: x.logical_or(y), np.round(a), np.round(b), mode=mode, wrt=[])
    check(lambda x: flame.logical_not(x > 0), lambda x: torch.logical_not(x > 0), a, mode=mode, wrt=[])
    check(lambda x, y: x.where(x > y, y * 2), lambda x, y: x.where(x > y, y * 2), a, b, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_products(mode):
    m, k, n = randn(3, 5), randn(5, 4, key=1), randn(3, 4, key=2)
    check(lambda x, y: flame.mm(x, y), lambda x, y: torch.mm(x, y), m, k, mode=mode)
    check(lambda x, y: x.matmul(y), lambda x, y: x.matmul(y), m, k, mode=mode)
    check(lambda x, y: flame.bmm(x, y), lambda x, y: torch.bmm(x, y), randn(2, 3, 5), randn(2, 5, 4, key=1),
          mode=mode)
    check(lambda x, y: flame.dot(x, y), lambda x, y: torch.dot(x, y), randn(6), randn(6, key=1), mode=mode)
    check(lambda x, y: x.outer(y), lambda x, y: x.outer(y), randn(3), randn(4, key=1), mode=mode)
    check(lambda c, x, y: flame.addmm(c, x, y, beta=0.5, alpha=2.0),
          lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0), n, m, k, mode=mode)
    check(lambda c, x, y: c.addmm(x, y), lambda c, x, y: c.addmm(x, y), randn(4), m, k, mode=mode)


def test_addmm_with_beta_zero_ignores_nan():
    c = np.full((2, 2), np.nan, np.float32)
    got = flame.addmm(flame.tensor(c), flame.ones(2, 3), flame.ones(3, 2), beta=0)
    np.testing.assert_array_equal(got.numpy(), np.full((2, 2), 3.0, np.float32))


def test_product_rank_errors_name_the_op_and_line():
    with pytest.raises(ShapeError, match="(?s)mm: expects 2-D tensors, got \\[2, 3, 4\\].*test_torch_spellings.py"):
        flame.mm(flame.ones(2, 3, 4), flame.ones(4, 2))
    with pytest.raises(ShapeError, match="bmm: batch sizes differ"):
        flame.bmm(flame.ones(2, 3, 4), flame.ones(3, 4, 2))
    with pytest.raises(ShapeError, match="dot: expects 1-D"):
        flame.dot(flame.ones(2, 2), flame.ones(2, 2))
    with pytest.raises(ShapeError, match="t: expects a tensor of at most 2"):
        flame.ones(2, 3, 4).t()


@pytest.mark.parametrize("mode", MODES)
def test_logsumexp(mode):
    x = randn(3, 4, 5) * 4
    for dim, keep in ((1, False), (-1, True), ((0, 2), False), ((0, 2), True)):
        check(lambda t, d=dim, k=keep: flame.logsumexp(t, d, k), lambda t, d=dim, k=keep: torch.logsumexp(t, d, k),
              x, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_interpolation_and_fused_products(mode):
    a, b, w = randn(3, 4), randn(3, 4, key=1), np.abs(randn(3, 4, key=2)) % 1
    check(lambda x, y: flame.lerp(x, y, 0.3), lambda x, y: torch.lerp(x, y, 0.3), a, b, mode=mode)
    check(lambda x, y: x.lerp(y, 0.75), lambda x, y: x.lerp(y, 0.75), a, b, mode=mode)
    check(lambda x, y, z: x.lerp(y, z), lambda x, y, z: x.lerp(y, z), a, b, w, mode=mode)
    check(lambda x, y, z: flame.addcmul(x, y, z, value=-0.5), lambda x, y, z: torch.addcmul(x, y, z, value=-0.5),
          a, b, w, mode=mode)
    check(lambda x, y, z: x.addcdiv(y, z + 1, value=2.0), lambda x, y, z: x.addcdiv(y, z + 1, value=2.0), a, b, w,
          mode=mode)


def test_lerp_weight_one_gives_end_exactly():
    a, b = flame.tensor(randn(64) * 1e3), flame.tensor(randn(64, key=1) * 1e-3)
    np.testing.assert_array_equal(a.lerp(b, 1.0).numpy(), b.numpy())


@pytest.mark.parametrize("mode", MODES)
def test_in_place_spellings_on_state(mode):
    """The EMA and optimizer idioms: ema.lerp_(p, 1 - decay), m.addcmul_(g, g, value=...), x.div_(...)."""
    a, b = randn(5), randn(5, key=1)
    for fn in (lambda e, p: e.lerp_(p, 0.1), lambda e, p: e.addcmul_(p, p, value=0.5),
               lambda e, p: e.addcdiv_(p, p * p + 1), lambda e, p: e.div_(p * p + 2)):
        ema, p = flame.tensor(a), flame.tensor(b)
        tema, tp = torch.tensor(a), torch.tensor(b)
        def update(fn=fn, ema=ema, p=p):
            return fn(ema, p)

        body = flame.compile(update) if mode == "compiled" else update
        for _ in range(3):
            body()
            fn(tema, tp)
        np.testing.assert_allclose(ema.numpy(), tema.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_picking_rolling_moving(mode):
    x = randn(3, 4, 5)
    check(lambda t: flame.select(t, 1, -1), lambda t: torch.select(t, 1, -1), x, mode=mode)
    check(lambda t: t.unbind(2), lambda t: t.unbind(2), x, mode=mode)
    check(lambda t: flame.roll(t, 2, 1), lambda t: torch.roll(t, 2, 1), x, mode=mode)
    check(lambda t: t.roll((-1, 7), (0, 2)), lambda t: t.roll((-1, 7), (0, 2)), x, mode=mode)
    check(lambda t: t.roll(5), lambda t: t.roll(5), x, mode=mode)
    check(lambda t: flame.movedim(t, 0, -1), lambda t: torch.movedim(t, 0, -1), x, mode=mode)
    check(lambda t: t.movedim((0, 1), (2, 0)), lambda t: t.movedim((0, 1), (2, 0)), x, mode=mode)
    check(lambda t: t.swapaxes(0, 2) + flame.swapdims(t, 0, 2), lambda t: t.swapaxes(0, 2) + torch.swapdims(t, 0, 2),
          x, mode=mode)
    check(lambda t: flame.t(t[0]), lambda t: torch.t(t[0]), x, mode=mode)
    with pytest.raises(IndexError, match="select: index 4 is out of range"):
        flame.select(flame.tensor(x), 1, 4)
    with pytest.raises(ValueError, match="roll: 2 shifts for 1 dims"):
        flame.tensor(x).roll((1, 2), 0)


@pytest.mark.parametrize("mode", MODES)
def test_max_min_forms(mode):
    a, b = randn(3, 4), randn(3, 4, key=1)
    check(lambda x: flame.max(x), lambda x: torch.max(x), a, mode=mode)
    check(lambda x: tuple(flame.max(x, 1)), lambda x: tuple(torch.max(x, 1)), a, mode=mode)
    check(lambda x: tuple(flame.min(x, 0, keepdim=True)), lambda x: tuple(torch.min(x, 0, keepdim=True)), a,
          mode=mode)
    check(lambda x, y: flame.max(x, y) + flame.min(x, y), lambda x, y: torch.max(x, y) + torch.min(x, y), a, b,
          mode=mode)
    check(lambda x: flame.argmin(x, 1), lambda x: torch.argmin(x, 1), a, mode=mode, wrt=[])


@pytest.mark.parametrize("mode", MODES)
def test_function_forms_of_methods(mode):
    x, i = randn(4, 5), np.array([[0, 4], [2, 2], [1, 0], [3, 3]])
    check(lambda t: flame.gather(t, 1, flame.tensor(i)), lambda t: torch.gather(t, 1, torch.tensor(i)), x, mode=mode)
    check(lambda t: flame.index_select(t, 0, flame.tensor([3, 1])),
          lambda t: torch.index_select(t, 0, torch.tensor([3, 1])), x, mode=mode)
    check(lambda t: (flame.var(t, 1), flame.std(t, 0)), lambda t: (torch.var(t, 1), torch.std(t, 0)), x, mode=mode)
    check(lambda t: flame.square(t) + flame.clone(t), lambda t: torch.square(t) + torch.clone(t), x, mode=mode)
    check(lambda t: flame.flatten(t[None], 1), lambda t: torch.flatten(t[None], 1), x, mode=mode)


def test_predicates():
    x = flame.ones(2, 3)
    assert flame.is_tensor(x) and not flame.is_tensor(np.ones(2))
    assert flame.is_floating_point(x) and not flame.arange(3).is_floating_point()
    assert flame.numel(x) == 6


def test_function_forms_show_the_methods_signature():
    import inspect

    assert list(inspect.signature(flame.addmm).parameters) == ["input", "mat1", "mat2", "beta", "alpha"]
    assert "two-sided" in flame.lerp.__doc__


# ---- elementwise and reductions composed from primitives ----------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_more_elementwise(mode):
    x, y = randn(4, 5) * 3, np.abs(randn(4, 5, key=1)) + 0.1
    for name in ("trunc", "frac", "sinh", "cosh", "tan"):
        check(lambda t, n=name: getattr(flame, n)(t), lambda t, n=name: getattr(torch, n)(t), x, mode=mode)
    for name in ("log2", "log10"):
        check(lambda t, n=name: getattr(t, n)(), lambda t, n=name: getattr(t, n)(), y, mode=mode)
    check(lambda a, b: flame.xlogy(a, b), lambda a, b: torch.xlogy(a, b), np.where(x > 1, 0, x), y, mode=mode)
    check(lambda t: flame.logit(t, eps=1e-3), lambda t: torch.logit(t, eps=1e-3), y / 4, mode=mode)
    small = np.float32([1e-30, -3e-8, 1e-5, -2e-3])  # sinh through expm1 keeps these to a few ulp
    np.testing.assert_allclose(flame.sinh(flame.tensor(small)).numpy(), torch.sinh(torch.tensor(small)).numpy(),
                               rtol=3e-7)


@pytest.mark.parametrize("mode", MODES)
def test_products_and_nan_reductions(mode):
    x = randn(3, 4) + 0.5
    x[1, 2] = 0.0  # a zero: the gradient of the other factors still flows, as cumprod's
    check(lambda t: flame.prod(t, 1), lambda t: torch.prod(t, 1), x, mode=mode)
    check(lambda t: t.prod(0, keepdim=True), lambda t: t.prod(0, keepdim=True), x, mode=mode)
    check(lambda t: t.prod(), lambda t: t.prod(), x[0], mode=mode)
    with_nan = x.copy()
    with_nan[0, 1] = np.nan
    check(lambda t: (flame.nansum(t, 1), t.nanmean()), lambda t: (torch.nansum(t, 1), t.nanmean()), with_nan,
          mode=mode, wrt=[])


@pytest.mark.parametrize("mode", MODES)
def test_diagonals(mode):
    x = randn(3, 5)
    for off in (0, 2, -1, 6):
        check(lambda t, o=off: flame.diagonal(t, o), lambda t, o=off: torch.diagonal(t, o), x, mode=mode)
    check(lambda t: t.diagonal(1, 0, 2), lambda t: t.diagonal(1, 0, 2), randn(3, 2, 4), mode=mode)
    check(lambda t: flame.diag(t, 1) + flame.diag(t, 1).T, lambda t: torch.diag(t, 1) + torch.diag(t, 1).T, randn(4),
          mode=mode)
    check(lambda t: flame.trace(t), lambda t: torch.trace(t), randn(4, 4), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_gathers_and_scatters(mode):
    x = randn(4, 5)
    idx = np.array([[0], [4], [2], [1]])
    check(lambda t: flame.take_along_dim(t, flame.tensor(idx), 1),
          lambda t: torch.take_along_dim(t, torch.tensor(idx), 1), x, mode=mode)
    check(lambda t: t.take_along_dim(flame.tensor(np.array([3, 0, 7]))),
          lambda t: t.take_along_dim(torch.tensor([3, 0, 7])), x, mode=mode)
    check(lambda t, s: flame.index_add(t, 0, flame.tensor([1, 3, 1]), s, alpha=2.0),
          lambda t, s: torch.index_add(t, 0, torch.tensor([1, 3, 1]), s, alpha=2.0), x, randn(3, 5, key=1), mode=mode)


def test_eager_only_selection_and_broadcasting():
    x = randn(3, 4)
    got = flame.masked_select(flame.tensor(x), flame.tensor(x[0] > 0))
    np.testing.assert_array_equal(got.numpy(), torch.masked_select(torch.tensor(x), torch.tensor(x[0] > 0)).numpy())
    a, b = flame.broadcast_tensors(flame.ones(3, 1), flame.zeros(4))
    assert a.shape == b.shape == (3, 4) and flame.broadcast_shapes((2, 1), (5,)) == (2, 5)
    with pytest.raises(ShapeError, match="do not broadcast"):
        flame.broadcast_shapes((2, 3), (4,))
    assert flame.atleast_2d(flame.tensor(1.0)).shape == (1, 1) and flame.atleast_1d(flame.tensor(1.0)).shape == (1,)
    assert flame.unflatten(flame.ones(2, 12), 1, (3, -1)).shape == (2, 3, 4) and flame.ones(2, 3).ravel().shape == (6,)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, dim, sizes",
                         [((0, 3, 4), 2, (-1, 2)), ((0, 3, 4), -1, (2, -1)), ((2, 6), 1, (3, -1, 1))])
def test_unflatten_infers_minus_one_from_the_dim_alone(shape, dim, sizes, mode):
    """unflatten's -1 comes from the size of dim, as torch's: also in a zero-size tensor, whose element count
    cannot say it (a ShapeError was raised there)."""
    check(lambda x: x.unflatten(dim, sizes) * 1.5, lambda x: x.unflatten(dim, sizes) * 1.5, randn(*shape), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_baddbmm(mode):
    check(lambda c, a, b: flame.baddbmm(c, a, b, beta=0.5, alpha=-1.0),
          lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=-1.0), randn(2, 3, 4), randn(2, 3, 5, key=1),
          randn(2, 5, 4, key=2), mode=mode)


def test_in_place_initialisers():
    x = flame.zeros(1000)
    x.uniform_(-2.0, 3.0, generator=flame.Generator(0))
    assert -2.0 <= x.numpy().min() and x.numpy().max() < 3.0 and abs(x.numpy().mean() - 0.5) < 0.15
    x.normal_(1.0, 0.5, generator=flame.Generator(0))
    assert abs(x.numpy().mean() - 1.0) < 0.1 and abs(x.numpy().std() - 0.5) < 0.1


# ---- order statistics, products of tensors, covariance --------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_kthvalue_and_median(mode):
    x = randn(4, 7)
    check(lambda t: flame.kthvalue(t, 3, 1).values, lambda t: torch.kthvalue(t, 3, 1).values, x, mode=mode)
    check(lambda t: t.median(0, keepdim=True).values, lambda t: t.median(0, keepdim=True).values, x, mode=mode)
    check(lambda t: flame.median(t), lambda t: torch.median(t), x[:, :6], mode=mode)  # even count: the lower one
    got = flame.tensor(x).median(1)
    np.testing.assert_array_equal(np.take_along_axis(x, got.indices.numpy()[:, None], 1)[:, 0], got.values.numpy())
    with pytest.raises(ShapeError, match="kthvalue: k=8 is out of range"):
        flame.kthvalue(flame.tensor(x), 8)


@pytest.mark.parametrize("mode", MODES)
def test_tensordot_kron_cross(mode):
    a, b = randn(2, 3, 4), randn(4, 3, 5, key=1)
    check(lambda x, y: flame.tensordot(x, y, ([1, 2], [1, 0])), lambda x, y: torch.tensordot(x, y, ([1, 2], [1, 0])),
          a, b, mode=mode)
    check(lambda x, y: flame.tensordot(x, y[:, :, 0], 1), lambda x, y: torch.tensordot(x, y[:, :, 0], 1), a, b,
          mode=mode)
    check(lambda x, y: flame.kron(x, y), lambda x, y: torch.kron(x, y), randn(2, 3), randn(3, 2, key=1), mode=mode)
    check(lambda x, y: flame.linalg.cross(x, y), lambda x, y: torch.linalg.cross(x, y), randn(4, 3), randn(4, 3, key=1),
          mode=mode)
    check(lambda x, y: flame.cross(x, y, dim=0), lambda x, y: torch.cross(x, y, dim=0), randn(3, 2), randn(3, 2, key=1),
          mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_cov_corrcoef_and_triangle_indices(mode):
    x = randn(3, 8)
    check(lambda t: (flame.cov(t), t.cov(correction=0), t.corrcoef()),
          lambda t: (torch.cov(t), t.cov(correction=0), t.corrcoef()), x, mode=mode)
    for args in ((3, 4, 1), (4, 3, -1), (5, 5, 0)):
        assert flame.tril_indices(*args).tolist() == torch.tril_indices(*args).tolist()
        assert flame.triu_indices(*args).tolist() == torch.triu_indices(*args).tolist()
