"""flame.frontend.more_math against torch on the CPU: values and gradients, eagerly and compiled
(function and method forms), the edge values (infinities, NaN, signed zeros, zeros of sinc and hypot,
ties of searchsorted), and the errors; a step over them planned for the GPU whose kernels compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import MODES, check, check_gpu_step, randn

EDGES = np.array([1.5, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 3e38, -1e-30], np.float32)


@pytest.mark.parametrize("mode", MODES)
def test_binary_elementwise(mode):
    a, b = randn(3, 4), randn(3, 4, key=1) * 3
    for name in ("logaddexp", "logaddexp2", "hypot", "copysign", "fmax", "fmin"):
        check(lambda x, y, n=name: getattr(flame, n)(x, y), lambda x, y, n=name: getattr(torch, n)(x, y), a, b,
              mode=mode)
        check(lambda x, y, n=name: getattr(x, n)(y), lambda x, y, n=name: getattr(x, n)(y), a, b, mode=mode)
    check(lambda x, y: flame.heaviside(x, y), lambda x, y: torch.heaviside(x, y), np.round(a), b, wrt=[], mode=mode)
    check(lambda x, y: flame.rsub(x, y, alpha=2), lambda x, y: torch.rsub(x, y, alpha=2), a, b, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_fmax_fmin_ties_give_the_gradient_to_input(mode):
    """Equal operands (a NaN opposite a number too): torch's fmax / fmin route the whole gradient to input,
    where maximum / minimum split it."""
    a = np.array([[1.0, 2.0, 0.0, np.nan, 3.0], [-1.0, 5.0, 0.0, 4.0, np.nan]])
    b = np.array([[1.0, 1.0, 0.0, 2.0, np.nan], [-1.0, 6.0, -0.0, 4.0, np.nan]])
    for name in ("fmax", "fmin"):
        check(lambda x, y, n=name: getattr(flame, n)(x, y), lambda x, y, n=name: getattr(torch, n)(x, y), a, b,
              mode=mode, rtol=0, atol=0)
        check(lambda x, y, n=name: getattr(x, n)(y[:1]), lambda x, y, n=name: getattr(x, n)(y[:1]), a, b,
              mode=mode, rtol=0, atol=0)


def test_binary_edges():
    """Every pair of edge values, as torch (values; gradients where torch's are finite)."""
    a, b = np.meshgrid(EDGES, EDGES)
    for name in ("logaddexp", "hypot", "copysign", "fmax", "fmin"):
        got = getattr(flame, name)(flame.tensor(a), flame.tensor(b)).numpy()
        want = getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-6, equal_nan=True, err_msg=name)
        if name == "copysign":
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(flame.signbit(flame.tensor(EDGES)).numpy(), torch.signbit(torch.tensor(EDGES)))


@pytest.mark.parametrize("mode", MODES)
def test_unary_elementwise(mode):
    x = randn(3, 5) * 2
    x[0, 0] = 0.0  # sinc's removable singularity, with its gradient 0
    for name in ("sinc", "exp2", "deg2rad", "rad2deg", "positive", "negative", "absolute", "sgn"):
        check(lambda t, n=name: getattr(flame, n)(t), lambda t, n=name: getattr(torch, n)(t), x,
              wrt=[] if name == "sgn" else None, mode=mode)  # torch's sgn gradient is a ZeroTensor
    check(lambda t: t.float_power(2.5), lambda t: t.float_power(2.5), np.abs(x) + 0.1, mode=mode, rtol=1e-6)
    edges = EDGES[np.isfinite(EDGES) | np.isinf(EDGES)]
    check(lambda t: flame.nan_to_num(t), lambda t: torch.nan_to_num(t), EDGES, wrt=[], mode=mode)
    check(lambda t: t.nan_to_num(1.0, 5.0, -7.0), lambda t: t.nan_to_num(1.0, 5.0, -7.0), edges, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_grids_and_products(mode):
    a, b, c = randn(3), randn(4, key=1), randn(2, key=2)
    for indexing in ("ij", "xy"):
        check(lambda x, y, z, i=indexing: flame.meshgrid(x, y, z, indexing=i),
              lambda x, y, z, i=indexing: torch.meshgrid(x, y, z, indexing=i), a, b, c, mode=mode)
    check(lambda x, y: flame.cartesian_prod(x, y), lambda x, y: torch.cartesian_prod(x, y), a, b, mode=mode)
    check(lambda x, y, z: flame.block_diag(x, y, z), lambda x, y, z: torch.block_diag(x, y, z),
          randn(2, 3), b, np.float32(5.0), mode=mode)
    m = randn(2, 3, 4)
    for k, dims in ((1, (0, 1)), (2, (1, 2)), (3, (2, 0)), (-1, (0, 2))):
        check(lambda t, k=k, d=dims: flame.rot90(t, k, d), lambda t, k=k, d=dims: torch.rot90(t, k, d), m, mode=mode)
    for offset, d1, d2 in ((0, -2, -1), (2, -2, -1), (-1, 0, 2), (1, 2, 0)):
        args = (offset, d1, d2)
        check(lambda t, a=args: t.diag_embed(*a), lambda t, a=args: t.diag_embed(*a), randn(2, 3), mode=mode)
    check(lambda i, mat, v: flame.addmv(i, mat, v, beta=0.5, alpha=2.0),
          lambda i, mat, v: torch.addmv(i, mat, v, beta=0.5, alpha=2.0), randn(3), randn(3, 4), b, mode=mode)
    check(lambda x, y: flame.vdot(x, y), lambda x, y: torch.vdot(x, y), b, b * 2, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_differences_sums_distances(mode):
    y, x = randn(3, 6), np.sort(randn(6, key=1))
    check(lambda t: flame.diff(t), lambda t: torch.diff(t), y, mode=mode)
    check(lambda t, p: t.diff(2, 0, prepend=p), lambda t, p: t.diff(2, 0, prepend=p), y, randn(2, 6, key=3),
          mode=mode)
    check(lambda t: flame.diff(t, append=flame.tensor(np.float32(1.0)).reshape(1, 1).expand(3, 1)),
          lambda t: torch.diff(t, append=torch.ones(3, 1)), y, mode=mode)
    check(lambda t, s: flame.trapezoid(t, s), lambda t, s: torch.trapezoid(t, s), y, x, mode=mode)
    check(lambda t: flame.trapezoid(t, dx=0.5, dim=0), lambda t: torch.trapezoid(t, dx=0.5, dim=0), y, mode=mode)
    check(lambda t, s: flame.cumulative_trapezoid(t, s), lambda t, s: torch.cumulative_trapezoid(t, s), y, x,
          mode=mode)
    p, q = randn(2, 4, 3), randn(2, 5, 3, key=1)
    for norm in (2.0, 1.0, 3.0):
        check(lambda a, b, n=norm: flame.cdist(a, b, n), lambda a, b, n=norm: torch.cdist(a, b, n), p, q, mode=mode,
              rtol=1e-4)
    check(lambda a: flame.cdist(a, a), lambda a: torch.cdist(a, a), p, mode=mode, rtol=1e-4)  # zero distances


@pytest.mark.parametrize("mode", MODES)
def test_searchsorted_and_bucketize(mode):
    seq = np.array([1.0, 2.0, 2.0, 3.0, 5.0], np.float32)
    v = np.array([[2.0, 0.0, 5.0], [2.5, 9.0, 1.0]], np.float32)
    for right in (False, True):
        check(lambda s, x, r=right: flame.searchsorted(s, x, right=r),
              lambda s, x, r=right: torch.searchsorted(s, x, right=r), seq, v, wrt=[], mode=mode)
        check(lambda x, s, r=right: flame.bucketize(x, s, right=r),
              lambda x, s, r=right: torch.bucketize(x, s, right=r), v, seq, wrt=[], mode=mode)
    batched = np.sort(randn(2, 6), -1)
    check(lambda s, x: flame.searchsorted(s, x, side="right", out_int32=True),
          lambda s, x: torch.searchsorted(s, x, side="right", out_int32=True), batched, v, wrt=[], mode=mode)
    order = np.array([4, 0, 3, 1, 2])
    shuffled = seq[np.argsort(order)]
    got = flame.searchsorted(flame.tensor(shuffled), flame.tensor(v), sorter=flame.tensor(np.argsort(shuffled)))
    np.testing.assert_array_equal(got.numpy(), torch.searchsorted(torch.tensor(seq), torch.tensor(v)).numpy())


@pytest.mark.parametrize("mode", MODES)
def test_statistics_pairs(mode):
    x = randn(3, 4)
    check(lambda t: flame.var_mean(t, 1), lambda t: torch.var_mean(t, 1), x, mode=mode)
    check(lambda t: flame.std_mean(t, 0, keepdim=True, correction=0),
          lambda t: torch.std_mean(t, 0, keepdim=True, correction=0), x, mode=mode)
    check(lambda t: flame.var_mean(t), lambda t: torch.var_mean(t), x, mode=mode)
    check(lambda t: t.var(1, False), lambda t: t.var(1, False), x, mode=mode)  # torch's positional unbiased
    check(lambda t: t.std(0, correction=2, keepdim=True), lambda t: t.std(0, correction=2, keepdim=True), x,
          mode=mode)
    check(lambda t: tuple(t.aminmax(dim=1)), lambda t: tuple(t.aminmax(dim=1)), x, mode=mode)
    check(lambda t: tuple(flame.aminmax(t)), lambda t: tuple(torch.aminmax(t)), x, mode=mode)
    assert flame.aminmax(flame.tensor(x)).max.item() == x.max()


def test_errors():
    with pytest.raises(ShapeError, match="block_diag: every input must have at most 2 dimensions"):
        flame.block_diag(flame.ones(2, 2, 2))
    with pytest.raises(ShapeError, match="cdist: expected"):
        flame.cdist(flame.ones(3, 2), flame.ones(3, 4))
    with pytest.raises(ShapeError, match="searchsorted: the leading dims"):
        flame.searchsorted(flame.ones(2, 5), flame.ones(3, 2))
    with pytest.raises(ShapeError, match="rot90: dims must differ"):
        flame.rot90(flame.ones(2, 2), 1, (1, 1))
    with pytest.raises(ValueError, match="meshgrid: indexing must be"):
        flame.meshgrid(flame.ones(2), indexing="yx")
    with pytest.raises(TypeError, match="var: give unbiased or correction"):
        flame.ones(3).var(unbiased=True, correction=0)


def test_a_step_of_them_plans_and_compiles_for_the_gpu(cuda_target):
    w = nn.Parameter(flame.randn(4, 4, generator=flame.Generator(5)))

    def body(x):
        h = x @ w
        loss = flame.logaddexp(h, h.flip(1)).mean() + flame.hypot(h, x).mean() + flame.sinc(h).sum()
        loss = loss + flame.cdist(h.unsqueeze(0), x.unsqueeze(0)).mean() + flame.diff(h, 1, 0).square().sum()
        loss = loss + flame.trapezoid(h, dx=0.5).sum() + flame.nan_to_num(h / x.abs().round()).clamp(-9, 9).mean()
        loss = loss + flame.copysign(h, x).sum() + flame.diag_embed(h).sum() + flame.rot90(h).triu().sum()
        loss = loss + (flame.searchsorted(flame.linspace(-2, 2, 7), h).float() * h).mean()
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(randn(5, 4)))


@pytest.mark.parametrize("mode", MODES)
def test_nan_to_num_passes_a_nan_gradient_on_at_replaced_elements_as_torch(mode):
    """nan_to_num's gradient is grad * isfinite(input) (torch's): an infinite gradient reaching a replaced
    element (sqrt's at the 0 a NaN became) is NaN there, not 0, and a finite one is 0."""
    x0 = np.array([np.nan, np.inf, -np.inf, 1.5, 0.25])

    def body(lib, x):
        y = lib.nan_to_num(x, 0.0, 2.0, 4.0)
        return y.sqrt().sum() + (y * y).sum()

    tx = torch.tensor(x0, requires_grad=True)
    want = body(torch, tx)
    want.backward()
    x = flame.tensor(x0, dtype=flame.float64, requires_grad=True)

    def step(x):
        loss = body(flame, x)
        loss.backward()
        return loss

    got = flame.compile(step)(x) if mode == "compiled" else step(x)
    assert np.isnan(tx.grad[0].item())  # the case this test is about
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_block_diag_promotes_its_inputs_as_torch(mode):
    """Blocks of different dtypes share torch's result type (a 0-d block counts as a scalar of its
    category), not the first block's: an int32 block beside a float one kept the floats' fractions off."""
    cases = [(np.array([[1, 2]], np.int32), np.array([[0.5]], np.float32)),
             (np.array([[True]]), np.array([[3]], np.int64)),
             (np.array(2.5, np.float64), np.array([1.0, 2.0], np.float32)),
             (np.array([[2.5]], np.float64), np.array([1.0], np.float32))]
    for a, b in cases:
        want = torch.block_diag(torch.tensor(a), torch.tensor(b))
        fn = flame.block_diag if mode == "eager" else flame.compile(lambda x, y: flame.block_diag(x, y))
        got = fn(flame.tensor(a), flame.tensor(b))
        assert got.dtype == getattr(flame, str(want.dtype).split(".")[-1])  # torch's dtype names
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["vdot", "cross", "linalg.cross"])
@pytest.mark.parametrize(("first", "second"), [("bfloat16", "float32"), ("float64", "float32"), ("float32", "int64")])
def test_vdot_and_cross_of_mixed_dtypes_raise_as_torch(name, first, second, mode):
    """torch's dot and cross kernels promote neither input: a pair of dtypes raises a RuntimeError."""
    def call(lib, a, b):
        fn = lib.linalg.cross if name == "linalg.cross" else getattr(lib, name)
        return fn(a, b)

    a, b = randn(3), randn(3, key=1)
    with pytest.raises(RuntimeError) as theirs:
        call(torch, torch.tensor(a).to(getattr(torch, first)), torch.tensor(b).to(getattr(torch, second)))
    run = (lambda x, y: call(flame, x, y)) if mode == "eager" else flame.compile(lambda x, y: call(flame, x, y))
    with pytest.raises(RuntimeError, match="dtype|scalar type") as mine:
        run(flame.tensor(a).to(getattr(flame, first)), flame.tensor(b).to(getattr(flame, second)))
    assert ("dtype" in str(theirs.value)) == ("dtype" in str(mine.value).split("(as in")[0])
