"""torch.special's composed functions (ndtr, log_ndtr, erfcx, entr, xlog1py, multigammaln and the aliases)
against torch in f64 and f32: values at the edges (0, negatives, large magnitudes, +-inf, NaN) and
gradients, eagerly and inside @flame.compile; plus randperm, renorm / renorm_ and t_."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.special as fs
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import check

MODES = ("eager", "compiled")
EDGES = [-np.inf, -1e300, -40.0, -30.0, -27.0, -26.0, -10.0, -5.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 4.99,
         5.0, 5.01, 9.99, 10.0, 10.01, 26.0, 30.0, 1e10, 1e300, np.inf, np.nan]
SMOOTH = np.array([-35.0, -12.0, -3.3, -1.2, -0.7, 0.2, 0.9, 2.5, 7.0, 11.0, 40.0])
UNARY = ["ndtr", "log_ndtr", "erfcx", "entr"]


def _flame_values(name, x, mode):
    fn = getattr(fs, name)
    t = flame.tensor(x)
    return (fn(t) if mode == "eager" else flame.compile(fn)(t)).numpy()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float32, 1e-6)])
def test_edge_values_match_torch(name, mode, dtype, rtol):
    with np.errstate(over="ignore"):  # -1e300 and 1e300 round to -+inf in f32
        x = np.array(EDGES, dtype=dtype)
    want = getattr(torch.special, name)(torch.from_numpy(x)).numpy()
    got = _flame_values(name, x, mode)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", UNARY)
def test_gradients_match_torch(name, mode):
    x = np.abs(SMOOTH) if name == "entr" else SMOOTH
    check(lambda t: getattr(fs, name)(t), lambda t: getattr(torch.special, name)(t), x, mode=mode, rtol=1e-12,
          atol=1e-300)


def test_log_ndtr_far_below_zero_is_finite_and_accurate():
    import mpmath

    with mpmath.workdps(40):
        for v in (-40.0, -200.0, -1e5):
            want = float(mpmath.log(mpmath.ncdf(v)))
            assert abs(fs.log_ndtr(flame.tensor(np.array([v]))).item() - want) <= 1e-14 * abs(want)


def test_erfcx_against_mpmath_for_large_arguments():
    import mpmath

    x = np.array([3.0, 9.99, 10.0, 10.5, 26.0, 27.0, 1e3, 1e8])
    with mpmath.workdps(40):
        want = np.array([float(mpmath.exp(v * v) * mpmath.erfc(v)) for v in x])
    np.testing.assert_allclose(fs.erfcx(flame.tensor(x)).numpy(), want, rtol=1e-14)


@pytest.mark.parametrize("mode", MODES)
def test_xlog1py_values_nan_rules_and_gradients(mode):
    x = np.array([0.0, 0.0, 1.0, 0.0, 2.0, 0.0, -3.0, np.nan, 0.0])
    y = np.array([-1.0, np.nan, -1.0, -2.0, -2.0, 0.5, 4.0, 1.0, np.inf])
    want = torch.special.xlog1py(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    run = fs.xlog1py if mode == "eager" else flame.compile(fs.xlog1py)
    np.testing.assert_array_equal(run(flame.tensor(x), flame.tensor(y)).numpy(), want)
    a, b = np.array([[0.0, 1.5, -2.0]]), np.array([[-0.5], [0.0], [3.0]])
    check(fs.xlog1py, torch.special.xlog1py, a, b, mode=mode, rtol=1e-13, atol=1e-15)
    assert fs.xlog1py(2, flame.tensor([1.0, 2.0])).dtype == flame.float32
    assert fs.xlog1py(flame.tensor([1, 2]), 3).dtype == flame.float32


@pytest.mark.parametrize("mode", MODES)
def test_multigammaln_and_aliases(mode):
    a = np.array([[2.5, 3.1], [7.0, 1.6]])
    for p in (1, 2, 3):
        check(lambda t, p=p: fs.multigammaln(t, p), lambda t, p=p: torch.special.multigammaln(t, p), a, mode=mode,
              rtol=1e-13, atol=1e-13)
    check(fs.expit, torch.special.expit, np.array([-800.0, -3.0, 0.0, 4.0, 800.0]), mode=mode, rtol=1e-15, atol=0)
    with pytest.raises(ValueError, match="p has to be greater than or equal to 1"):
        fs.multigammaln(flame.tensor(a), 0)
    for name in ("exp2", "expm1", "log1p", "sinc", "logit", "xlogy"):
        assert getattr(fs, name) is not None


@pytest.mark.parametrize("mode", MODES)
def test_randperm_is_a_permutation(mode):
    make = (lambda: flame.randperm(100)) if mode == "eager" else flame.compile(lambda: flame.randperm(100))
    p = make()
    assert p.dtype == flame.int64 and sorted(p.numpy().tolist()) == list(range(100))
    g = flame.Generator()
    g.manual_seed(7)
    a = flame.randperm(50, generator=g, dtype=flame.float32)
    g.manual_seed(7)
    assert a.dtype == flame.float32 and np.array_equal(a.numpy(), flame.randperm(50, generator=g).numpy())
    assert flame.randperm(0).shape == (0,)
    assert sorted(flame.randperm(256, dtype=flame.uint8).numpy().tolist()) == list(range(256))


def test_randperm_errors_as_torch():
    with pytest.raises(ValueError, match="negative dimension"):
        flame.randperm(-1)
    with pytest.raises(ValueError, match="without overflow"):
        flame.randperm(300, dtype=flame.uint8)
    with pytest.raises(TypeError, match="must be int, not float"):
        flame.randperm(3.0)
    with pytest.raises(TypeError, match="not implemented for bool"):
        flame.randperm(3, dtype=flame.bool)
    with pytest.raises(TypeError, match="floating point"):
        flame.randperm(3, requires_grad=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", [1, 2, 3.5, float("inf")])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_renorm_values_and_gradients(mode, p, dim):
    x = np.random.default_rng(3).normal(size=(3, 4, 2)) * 2
    x[1] = 0.0  # a zero sub-tensor along dim 0
    check(lambda t: flame.renorm(t, p, dim, 1.5), lambda t: torch.renorm(t, p, dim, 1.5), x, mode=mode, rtol=1e-13,
          atol=1e-15)
    check(lambda t: t.renorm(p, dim, 0.0), lambda t: t.renorm(p, dim, 0.0), x, mode=mode, rtol=1e-13, atol=1e-15)


def test_renorm_in_place_and_errors():
    x = np.random.default_rng(4).normal(size=(4, 3)) * 3
    t = flame.tensor(x)
    assert t.renorm_(2, 0, 1.0) is t
    np.testing.assert_allclose(t.numpy(), torch.tensor(x).renorm_(2, 0, 1.0).numpy(), rtol=1e-14)
    for args, msg in [((2, 0, -1.0), "maxnorm to be >= 0"), ((0, 0, 1.0), "non-positive-norm"),
                      ((-1, 0, 1.0), "non-positive-norm")]:
        with pytest.raises(ValueError, match=msg):
            flame.renorm(flame.tensor(x), *args)
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        flame.renorm(flame.ones(3), 2, 0, 1.0)
    with pytest.raises(IndexError):
        flame.renorm(flame.tensor(x), 2, 2, 1.0)
    with pytest.raises(TypeError):
        flame.renorm(flame.ones(2, 2, dtype=flame.int64), 2, 0, 1.0)


def test_t_in_place():
    x = flame.tensor(np.arange(9.0).reshape(3, 3))
    assert x.t_() is x
    np.testing.assert_array_equal(x.numpy(), np.arange(9.0).reshape(3, 3).T)
    v = flame.tensor([1.0, 2.0])
    assert v.t_() is v and v.shape == (2,)
    with pytest.raises(ShapeError, match="<= 2 dimensions"):
        flame.ones(2, 3, 4).t_()
    with pytest.raises(ShapeError, match=r"x = x.t\(\)"):
        flame.ones(2, 3).t_()
    leaf = flame.ones(2, 2, requires_grad=True)
    with pytest.raises(flame.errors.FlameError, match="leaf"):
        leaf.t_()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_t_in_place_of_a_view_refuses_rather_than_write_into_its_base(compiled):
    """torch's t_ of a view restrides the view alone (its base keeps its values); flame wrote the
    transpose's values through the view, silently changing the base. It raises, naming x = x.t()."""
    tx = torch.arange(4.0).reshape(2, 2).clone()
    tx.view(2, 2).t_()
    assert tx.tolist() == [[0.0, 1.0], [2.0, 3.0]]  # torch: the base as it was

    def f(x):
        return x.view(2, 2).t_()

    run = flame.compile(f) if compiled else f
    x = flame.arange(4.0).reshape(2, 2).clone()
    with pytest.raises(NotImplementedError, match=r"t_: flame does not change a view's strides in place.*x = x.t\(\)"):
        run(x)
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


BESSEL = ["i0", "i0e", "i1", "i1e"]
BESSEL_EDGES = [-np.inf, -1e10, -710.0, -100.0, -40.0, -20.01, -20.0, -19.99, -10.0, -1.0, -0.0, 0.0, 1e-20, 0.5,
                5.0, 19.99, 20.0, 27.0, 88.0, 89.0, 92.0, 700.0, 1e10, 1e300, np.inf, np.nan]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", BESSEL)
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 2e-15), (np.float32, 1e-6)])
def test_bessel_edge_values_match_torch(name, mode, dtype, rtol):
    with np.errstate(over="ignore"):
        x = np.array(BESSEL_EDGES, dtype=dtype)
    want = getattr(torch.special, name)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_flame_values(name, x, mode), want, rtol=rtol, atol=0, equal_nan=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", BESSEL)
def test_bessel_gradients_match_torch(name, mode):
    x = np.array([-45.0, -20.5, -7.0, -0.3, 0.0, 1e-17, 0.8, 3.0, 19.5, 25.0, 60.0])
    check(lambda t: getattr(fs, name)(t), lambda t: getattr(torch.special, name)(t), x, mode=mode, rtol=1e-13,
          atol=1e-300)


def test_i0_names_and_in_place():
    x = np.array([-3.0, 0.5, 12.0])
    np.testing.assert_allclose(flame.i0(flame.tensor(x)).numpy(), torch.i0(torch.tensor(x)).numpy(), rtol=1e-15)
    t = flame.tensor(x)
    assert t.i0_() is t
    np.testing.assert_allclose(t.numpy(), torch.i0(torch.tensor(x)).numpy(), rtol=1e-15)
    assert flame.i0(flame.tensor([1, 2])).dtype == flame.float32
    a = np.array([2.5, 4.0])
    np.testing.assert_allclose(flame.tensor(a).mvlgamma(2).numpy(), torch.tensor(a).mvlgamma(2).numpy(), rtol=1e-15)
    np.testing.assert_allclose(flame.mvlgamma(flame.tensor(a), 3).numpy(), torch.mvlgamma(torch.tensor(a), 3).numpy(),
                               rtol=1e-15)
    assert fs.modified_bessel_i0 is fs.i0 and fs.modified_bessel_i1 is fs.i1


NDTRI_EDGES = [-1.0, -1e-300, 0.0, 5e-324, 1e-300, 1e-100, 1e-20, 1e-8, 1e-3, 0.1, 0.2499999, 0.25, 0.3, 0.5 - 1e-12,
               0.5, 0.5 + 1e-12, 0.7, 0.99, 1 - 1e-10, 1.0, 1.5, np.inf, np.nan]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 2e-15), (np.float32, 1e-6)])
def test_ndtri_values_and_gradients(mode, dtype, rtol):
    x = np.array(NDTRI_EDGES, dtype=dtype)
    want = torch.special.ndtri(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_flame_values("ndtri", x, mode), want, rtol=rtol, atol=0, equal_nan=True)
    p = np.array([1e-250, 1e-9, 0.05, 0.3, 0.5, 0.8, 0.999])
    # exp(x^2 / 2) turns x's last-bit rounding into x^2 ulps: about 1e-13 relative at p = 1e-250
    check(fs.ndtri, torch.special.ndtri, p, mode=mode, rtol=1e-12, atol=0)


def test_ndtri_inverts_log_ndtr_far_in_the_tail():
    import mpmath

    with mpmath.workdps(40):
        for x in (-37.0, -20.0, -5.0):  # (p is subnormal below about -37.5: fewer bits to invert)
            p = float(mpmath.ncdf(x))
            assert abs(fs.ndtri(flame.tensor(np.array([p]))).item() - x) <= 2e-15 * abs(x)
