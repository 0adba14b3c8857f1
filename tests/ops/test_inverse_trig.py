"""asin, acos, atan, asinh, acosh, atanh, erfc and atan2 (Tensor methods, their arc* aliases, in-place
forms, function forms) against torch on the CPU: values and gradients in f64 and f32, eagerly and inside
@flame.compile, the ends of their domains, signed zeros and infinities, integer and half inputs, bad
arguments, and the CUDA plan's kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flame
from flame.errors import ArgumentTypeError
from tests.ops.test_everyday_ops import _rng, check, check_gpu_step

MODES = ("eager", "compiled")
TOL = {np.float64: (1e-12, 1e-12), np.float32: (2e-6, 2e-6)}
UNIT = ("asin", "acos", "atanh")  # defined on (-1, 1)


def _draw(name: str, dtype, *shape, key=0):
    """Inputs inside `name`'s domain, away from its ends (where gradients are singular)."""
    rng = _rng(name, shape, key)
    if name in UNIT:
        return rng.uniform(-0.95, 0.95, shape).astype(dtype)
    if name == "acosh":
        return rng.uniform(1.05, 6.0, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["asin", "acos", "atan", "asinh", "acosh", "atanh", "erfc"])
def test_unary_values_and_gradients(name, mode, dtype):
    rtol, atol = TOL[dtype]
    x = _draw(name, dtype, 4, 5)
    check(lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), x, mode=mode, rtol=rtol, atol=atol)
    check(lambda t: getattr(flame, name)(t), lambda t: getattr(torch, name)(t), x, mode=mode, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
def test_atan2_values_and_gradients_with_broadcasting(mode, dtype):
    rtol, atol = TOL[dtype]
    y = _draw("atan", dtype, 3, 4, key=1)
    x = _draw("atan", dtype, 4, key=2)
    check(lambda a, b: flame.atan2(a, b), lambda a, b: torch.atan2(a, b), y, x, mode=mode, rtol=rtol, atol=atol)
    check(lambda a, b: b.arctan2(a), lambda a, b: b.arctan2(a), y, x, mode=mode, rtol=rtol, atol=atol)


def _same(got: flame.Tensor, want: torch.Tensor) -> None:
    """To an ulp, NaNs where torch's and the sign of zero included (a NaN's sign bit is not compared)."""
    g, w = got.numpy(), want.numpy()
    assert g.dtype == w.dtype
    number = ~np.isnan(w)
    np.testing.assert_array_equal(np.signbit(g[number]), np.signbit(w[number]))
    np.testing.assert_allclose(g, w, rtol=4e-16, atol=0, equal_nan=True)  # libm's, to an ulp


def test_the_ends_of_the_domains_as_torch():
    edges = [-math.inf, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, math.inf, math.nan]
    x = np.array(edges, np.float64)
    with np.errstate(all="ignore"):
        for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "erfc"):
            _same(getattr(flame.tensor(x), name)(), getattr(torch.tensor(x), name)())
    # atan2 on every pair of signed zeros and infinities: the quadrant comes from the signs
    ends = np.array([-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf, math.nan])
    y, x = np.meshgrid(ends, ends, indexing="ij")
    _same(flame.atan2(flame.tensor(y), flame.tensor(x)), torch.atan2(torch.tensor(y), torch.tensor(x)))


def test_gradients_at_the_singular_points_as_torch():
    """torch's formulas give inf at asin's, atanh's and acosh's ends; atan2's is zero at the origin and
    where the squares underflow, NaN against an infinity."""
    for name, at in (("asin", [1.0, -1.0]), ("acos", [1.0]), ("atanh", [1.0, -1.0]), ("acosh", [1.0])):
        a, t = flame.tensor(at, dtype=flame.float64, requires_grad=True), torch.tensor(at, requires_grad=True)
        getattr(a, name)().sum().backward()
        getattr(t, name)().sum().backward()
        np.testing.assert_array_equal(a.grad.numpy(), t.grad.numpy())
    pairs = np.array([[0.0, 0.0], [0.0, 1.0], [1e-200, 1e-200], [1e-170, 0.0], [math.inf, 1.0], [1.0, math.inf]])
    ys, xs = (flame.tensor(pairs[:, i], requires_grad=True) for i in (0, 1))
    ty, tx = (torch.tensor(pairs[:, i], requires_grad=True) for i in (0, 1))
    flame.atan2(ys, xs).sum().backward()
    torch.atan2(ty, tx).sum().backward()
    np.testing.assert_array_equal(ys.grad.numpy(), ty.grad.numpy())
    np.testing.assert_array_equal(xs.grad.numpy(), tx.grad.numpy())


def test_integer_inputs_give_f32_and_half_inputs_keep_their_dtype():
    ints = [-1, 0, 1, 3]
    for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "erfc"):
        got, want = getattr(flame.tensor(ints), name)(), getattr(torch.tensor(ints), name)()
        assert got.dtype == flame.float32 and want.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)
    got = flame.atan2(flame.tensor([1, -2]), flame.tensor([3, 4]))
    want = torch.atan2(torch.tensor([1, -2]), torch.tensor([3, 4]))
    assert got.dtype == flame.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    half = np.array([-0.75, -0.25, 0.125, 0.5], np.float32)
    for dt, tdt in ((flame.bfloat16, torch.bfloat16), (flame.float16, torch.float16)):
        for name in ("asin", "atan", "erfc"):
            got = getattr(flame.tensor(half).to(dt), name)()
            want = getattr(torch.tensor(half).to(tdt), name)()
            assert got.dtype == dt
            np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
        # f32 with bf16: the wider dtype, as torch's promotion
        mixed = flame.atan2(flame.tensor(half), flame.tensor(half[::-1].copy()).to(dt))
        assert mixed.dtype == flame.float32


def test_aliases_in_place_forms_and_functions():
    x = np.array([-0.5, 0.25, 0.75])
    close = dict(rtol=4e-16, atol=0)  # libm's, to an ulp
    for name in ("asin", "acos", "atan", "asinh", "atanh"):
        alias = "arc" + name[1:]
        got = getattr(flame.tensor(x), name)().numpy()
        np.testing.assert_allclose(got, getattr(torch.tensor(x), name)().numpy(), **close)
        np.testing.assert_array_equal(getattr(flame.tensor(x), alias)().numpy(), got)
        np.testing.assert_array_equal(getattr(flame, alias)(flame.tensor(x)).numpy(), got)
        a = flame.tensor(x)
        assert getattr(a, name + "_")() is a
        np.testing.assert_array_equal(a.numpy(), got)
        assert hasattr(torch.Tensor, alias) and hasattr(torch.Tensor, name + "_")  # the names are torch's
    a, t = flame.tensor(x), torch.tensor(x)
    a.atan2_(flame.tensor([1.0]))
    t.atan2_(torch.tensor([1.0]))
    np.testing.assert_allclose(a.numpy(), t.numpy(), **close)
    a, t = flame.tensor(x + 2), torch.tensor(x + 2)
    a.arccosh_()
    t.arccosh_()
    np.testing.assert_allclose(a.numpy(), t.numpy(), **close)
    with pytest.raises(flame.DTypeError):  # the f32 result does not fit an integer tensor, as torch refuses
        flame.tensor([1, 2]).asin_()
    with pytest.raises(RuntimeError):
        torch.tensor([1, 2]).asin_()


def test_atan2_takes_tensors_only_as_torch():
    with pytest.raises(ArgumentTypeError, match="atan2.*'other' must be Tensor, not float") as err:
        flame.atan2(flame.tensor([1.0]), 2.0)
    assert "test_inverse_trig.py" in str(err.value)
    with pytest.raises(TypeError):
        torch.atan2(torch.tensor([1.0]), 2.0)


def test_a_step_through_them_plans_and_compiles_for_cuda(cuda_target):
    """The loss and gradient as the reference executor's, and every kernel compiles with NVRTC for sm_90."""
    w = flame.tensor(_draw("asin", np.float32, 6) * 0.5, requires_grad=True)
    x = flame.tensor(_draw("atan", np.float32, 4, 6))

    def body(x):
        z = (w * 0.9).asin() + (w * 0.5).acos() * x.atan() + (x * w).asinh() + (x.abs() + 1.5 + w).acosh()
        z = z + (w * 0.8).atanh() + (x * w).erfc() + flame.atan2(x, w + 2.0)
        loss = z.sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, x)


def test_special_erfc_is_torchs():
    x = np.linspace(-3, 8, 12)
    np.testing.assert_allclose(
        flame.special.erfc(flame.tensor(x)).numpy(), torch.special.erfc(torch.tensor(x)).numpy(), rtol=1e-15, atol=0
    )
