"""lgamma, digamma, polygamma and erfinv (Tensor methods, in-place forms, function forms, flame.special)
against torch on the CPU: values and gradients in f64 and f32, eagerly and inside @flame.compile, the poles
and the ends of erfinv's domain, integer inputs, bad arguments, and the CUDA plan's kernels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import ArgumentError, ArgumentTypeError, DTypeError
from tests.ops.test_everyday_ops import _rng, check, check_gpu_step

MODES = ("eager", "compiled")
TOL = {np.float64: (1e-11, 1e-11), np.float32: (2e-5, 2e-5)}
TORCH_TRIGAMMA = 1e-9  # torch's trigamma (its digamma's gradient) is good to about 5e-10 in f64; flame's to 1e-15


def _positive(dtype, *shape, key=0):
    return _rng("pos", shape, key).uniform(0.1, 6.0, shape).astype(dtype)


def _negative(dtype, *shape, key=0):
    """Negative non-integers, at least 0.1 from a pole."""
    x = -_rng("neg", shape, key).integers(0, 5, shape) - _rng("negf", shape, key).uniform(0.1, 0.9, shape)
    return x.astype(dtype)


def _unit(dtype, *shape, key=0):
    return _rng("unit", shape, key).uniform(-0.95, 0.95, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
def test_lgamma_digamma_values_and_gradients(mode, dtype):
    rtol, atol = TOL[dtype]
    for x in (_positive(dtype, 3, 5), _negative(dtype, 4, 3)):
        check(lambda t: t.lgamma(), lambda t: t.lgamma(), x, mode=mode, rtol=rtol, atol=atol)
        rt = max(rtol, TORCH_TRIGAMMA)
        check(lambda t: flame.digamma(t), lambda t: torch.digamma(t), x, mode=mode, rtol=rt, atol=atol)
        check(
            lambda t: flame.special.gammaln(t), lambda t: torch.special.gammaln(t), x, mode=mode, rtol=rtol, atol=atol
        )
        check(lambda t: flame.special.psi(t), lambda t: torch.special.psi(t), x, mode=mode, rtol=rt, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
def test_polygamma_values_and_gradients(mode, dtype):
    rtol, atol = TOL[dtype]
    x = _positive(dtype, 3, 4)
    for n in (0, 1, 2, 3):
        check(
            lambda t, n=n: flame.polygamma(n, t),
            lambda t, n=n: torch.polygamma(n, t),
            x,
            mode=mode,
            rtol=max(rtol, TORCH_TRIGAMMA) if n < 2 else rtol,
            atol=atol,
        )
    neg = _negative(dtype, 2, 3)
    check(lambda t: t.polygamma(1), lambda t: t.polygamma(1), neg, mode=mode, rtol=max(rtol, TORCH_TRIGAMMA), atol=atol)
    check(
        lambda t: flame.special.polygamma(2, t),
        lambda t: torch.special.polygamma(2, t),
        neg,
        mode=mode,
        rtol=rtol,
        atol=atol,
    )


def test_trigamma_is_accurate_in_f64():
    """polygamma(1, x) against mpmath to a few ulp, over the reflection, the recurrence and the series."""
    import mpmath

    x = np.concatenate([_positive(np.float64, 40), _negative(np.float64, 20), [0.5, 9.99, 10.0, 123.25, 1e8]])
    want = np.array([float(mpmath.polygamma(1, v)) for v in x])
    for got in (flame.polygamma(1, flame.tensor(x)), flame.compile(lambda t: t.polygamma(1))(flame.tensor(x))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-14)


def test_second_derivative_of_digamma_is_polygamma_2():
    x = _positive(np.float64, 5)
    t = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(torch.digamma(t).sum(), t, create_graph=True)
    (ggt,) = torch.autograd.grad(gt.sum(), t)

    @flame.compile
    def second(v):
        (g,) = flame.autograd.grad(v.digamma().sum(), v, create_graph=True)
        (gg,) = flame.autograd.grad(g.sum(), v)
        return g, gg

    g, gg = second(flame.tensor(x, requires_grad=True))
    np.testing.assert_allclose(g.numpy(), gt.detach().numpy(), rtol=1e-9)
    np.testing.assert_allclose(gg.numpy(), ggt.numpy(), rtol=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
def test_erfinv_values_and_gradients(mode, dtype):
    rtol, atol = TOL[dtype]
    x = _unit(dtype, 4, 6)
    check(lambda t: t.erfinv(), lambda t: t.erfinv(), x, mode=mode, rtol=rtol, atol=atol)
    check(lambda t: flame.special.erfinv(t), lambda t: torch.special.erfinv(t), x, mode=mode, rtol=rtol, atol=atol)


POLES = np.array([0.0, -0.0, -1.0, -2.0, -7.0, 1.0, 2.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3e5])
ENDS = np.array([1.0, -1.0, 1.5, -1.5, 2.0, np.inf, -np.inf, np.nan, 0.0, -0.0, 0.999999, -0.999999])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
def test_poles_and_domain_ends_as_torch(mode, dtype):
    """lgamma(0) = inf, digamma(+-0) = -+inf, NaN at the negative integers, trigamma's values there,
    erfinv(+-1) = +-inf and NaN beyond [-1, 1]: torch's answers, infinities and NaNs in place."""
    rtol, atol = TOL[dtype]
    fns = [("lgamma", POLES), ("digamma", POLES), ("erfinv", ENDS)]
    if dtype == np.float64:  # trigamma's values at the poles come from sin(pi x) rounding; f64's are torch's
        fns.append(("polygamma1", POLES))
    for name, data in fns:
        x = data.astype(dtype)

        def run(t, lib, name=name):
            return lib.polygamma(1, t) if name == "polygamma1" else getattr(lib, name)(t)

        want = run(torch.tensor(x), torch).numpy()
        got = (
            run(flame.tensor(x), flame) if mode == "eager" else flame.compile(lambda t: run(t, flame))(flame.tensor(x))
        )
        got = got.numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=name)
        np.testing.assert_array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want[np.isinf(want)]), err_msg=name)
        finite = np.isfinite(want)
        rt = max(rtol, TORCH_TRIGAMMA) if name == "polygamma1" else rtol
        np.testing.assert_allclose(got[finite], want[finite], rtol=rt, atol=atol, err_msg=name)


@pytest.mark.parametrize("mode", MODES)
def test_gradients_at_the_poles_as_torch(mode):
    x = np.array([0.5, -0.5, 1.0, -1.5, 0.0, 3.0])
    check(lambda t: t.lgamma(), lambda t: t.lgamma(), x, mode=mode, rtol=1e-11, atol=1e-11)
    e = np.array([-0.999, 0.0, 0.3, 0.9999])
    check(lambda t: t.erfinv(), lambda t: t.erfinv(), e, mode=mode, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv"])
def test_integer_inputs_promote_to_float(name):
    ints = np.array([1, 2, 3, 0, -1]) if name != "erfinv" else np.array([0, 1, -1, 2])
    want = getattr(torch, name)(torch.tensor(ints))
    got = getattr(flame, name)(flame.tensor(ints))
    assert got.dtype == flame.float32 and want.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)
    got = flame.compile(lambda t: getattr(t, name)())(flame.tensor(ints))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)
    p = flame.polygamma(1, flame.tensor(np.array([1, 2, 3])))
    assert p.dtype == flame.float32
    np.testing.assert_allclose(p.numpy(), torch.polygamma(1, torch.tensor([1, 2, 3])).numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv"])
def test_in_place_forms(name):
    x = _unit(np.float32, 3, 4) + (2.0 if name != "erfinv" else 0.0)
    want = getattr(torch.tensor(x), f"{name}_")()
    t = flame.tensor(x)
    assert getattr(t, f"{name}_")() is t
    np.testing.assert_allclose(t.numpy(), want.numpy(), rtol=2e-5, atol=2e-6)
    p = flame.tensor(x + 3.0)
    p.polygamma_(1)
    np.testing.assert_allclose(p.numpy(), torch.tensor(x + 3.0).polygamma_(1).numpy(), rtol=2e-5)
    with pytest.raises(DTypeError, match="can't be cast"):
        getattr(flame.tensor([1, 2]), f"{name}_")()


def test_polygamma_bad_order_is_a_clear_error():
    x = flame.tensor([1.0, 2.0])
    with pytest.raises(ArgumentError, match="negative n.*n = -1"):
        flame.polygamma(-1, x)
    with pytest.raises(ArgumentTypeError, match="'n' must be int, not float"):
        x.polygamma(1.5)
    with pytest.raises(RuntimeError):
        torch.polygamma(-1, torch.tensor([1.0]))


def test_erfinv_autocasts_to_f32_and_lgamma_keeps_the_dtype():
    """erfinv is on PyTorch's CUDA autocast float32 list; lgamma and digamma are on none of them."""
    x = flame.tensor(_unit(np.float32, 4)).to(flame.bfloat16)
    with flame.autocast("cuda", dtype=flame.bfloat16):
        assert x.erfinv().dtype == flame.float32
        assert x.lgamma().dtype == flame.bfloat16 and x.digamma().dtype == flame.bfloat16


def test_special_functions_plan_and_compile_for_cuda(cuda_target):
    """A step through all four ops on the CUDA target: the loss and gradient as the reference, and every
    kernel of the plan compiles with NVRTC for sm_90."""
    w = flame.tensor(_unit(np.float32, 6), requires_grad=True)
    x = flame.tensor(_positive(np.float32, 4, 6))

    def body(x):
        z = (x + w * 0.1).lgamma() + (x + 1.0).digamma() + flame.polygamma(1, x) * w + (w * 0.5).erfinv()
        loss = z.sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, x)
