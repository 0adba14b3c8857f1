"""fmod against torch, eagerly and inside @flame.compile: the dividend's sign, integer and float dtypes, scalar and
tensor divisors, broadcasting, type promotion, -0.0, infinities and NaN, the in-place fmod_, and torch's
gradients (1 for the dividend, -trunc(x / other) for the divisor). Integer floor_divide, remainder, fmod and
div(rounding_mode=...) by a zero, a Python 0 or one held in a tensor, raise flame.ZeroDivisorError (a
RuntimeError, as torch's CPU raises) naming the op and the user's line; float divisors of zero divide as IEEE."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check, gradients

I = np.array([-7, -3, 0, 3, 7, 8, -(2**62)])  # noqa: E741
D = np.array([2, -2, 3, -3, -5, 3, -1])
F = np.array([5.5, -5.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, 3.0, -3.0], np.float32)
G = np.array([2.0, 2.0, -1.5, 1.5, 2.0, -2.0, 1.0, 7.0, np.inf, -np.inf], np.float32)

CASES = {
    "ints": (lambda L, x, y: (L.fmod(x, y), x.fmod(y)), I, D),
    "int by Python ints": (lambda L, x: (x.fmod(3), x.fmod(-3), L.fmod(x, 1)), I),
    "i8 minimum by -1": (
        lambda L, x, y: L.fmod(x, y),
        np.array([-128, 127, -5], np.int8),
        np.array([-1, -1, 2], np.int8),
    ),
    "floats": (lambda L, x, y: L.fmod(x, y), F, G),
    "floats by Python numbers": (lambda L, x: (x.fmod(2.5), x.fmod(-2.5), x.fmod(0.0), x.fmod(float("inf"))), F),
    "f64": (lambda L, x, y: L.fmod(x, y), F.astype(np.float64), G.astype(np.float64)),
    "f16 and bf16": (lambda L, x, y: (L.fmod(x.half(), y.half()), L.fmod(x.bfloat16(), 1.5)), F[:4], G[:4]),
    "broadcast": (lambda L, x, y: L.fmod(x.reshape(-1, 1), y), I[:6], D[:4]),
    "int by a float is f32": (lambda L, x: (x.fmod(2.5), L.fmod(x, 0.5)), I[:6]),
    "int by a float tensor": (lambda L, x, y: L.fmod(x, y), I[:6], G[:6]),
    "i32 by a 0-d i64 stays i32": (lambda L, x: L.fmod(x, L.tensor(3)), I[:6].astype(np.int32)),
    "u8 by i8 is i32 (flame has no i16)": (
        lambda L, x, y: L.fmod(x, y).to(L.int32),
        np.array([200, 7, 9], np.uint8),
        np.array([-3, 2, 4], np.int8),
    ),
    "f32 by a 0-d f64 stays f32": (lambda L, x: L.fmod(x, L.tensor(1.5, dtype=L.float64)), F),
    "fmod_ in place": (lambda L, x: x.fmod_(3), I[:6]),
    "fmod_ of floats in place": (lambda L, x: x.fmod_(-1.5), F),
    "fmod_ of ints by a float raises": (lambda L, x: x.fmod_(2.5), I[:6]),
    "fmod of bools raises": (lambda L, x: L.fmod(x > 0, x > 1), I),
    "empty by a zero": (lambda L, x: (x // L.tensor(0), x % L.tensor(0), x.fmod(L.tensor(0))), np.zeros(0, np.int64)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_fmod(name, compiled):
    f, *args = CASES[name]
    check(f, *args, compiled=compiled, atol=1e-6)


X = np.array([7.25, -7.25, 3.5, -0.75, 10.0, -4.0], np.float64)
Y = np.array([2.0, 2.0, -1.5, 0.5, 3.0, 1.5], np.float64)
W = np.linspace(0.5, 3.0, 6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fmod_gradients(compiled):
    def of_x(L, x):
        return (L.fmod(x, L.tensor(Y)) * L.tensor(W)).sum()

    def of_other(L, y):
        return (L.fmod(L.tensor(X), y) * L.tensor(W)).sum()

    def of_both(L, x):
        return (x.fmod(x.flip(0) * 0.3 + 0.7) * L.tensor(W)).sum() + x.fmod(2.0).sum()

    for f, at in ((of_x, X), (of_other, Y), (of_both, X)):
        got, want = gradients(f, at, compiled)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fmod_gradient_in_f32_broadcast(compiled):
    def f(L, y):
        return (L.tensor(X.astype(np.float32)).reshape(-1, 1).fmod(y) * 1.5).sum()

    got, want = gradients(f, Y[:4].astype(np.float32), compiled)
    np.testing.assert_allclose(got, want, rtol=1e-6)


ZERO = np.array([1, 0, 1, 1, 1, 1, 1])
DIVISIONS = {
    "floor_divide": lambda L, x, y: L.floor_divide(x, y),
    "//": lambda L, x, y: x // y,
    "remainder": lambda L, x, y: L.remainder(x, y),
    "%": lambda L, x, y: x % y,
    "fmod": lambda L, x, y: L.fmod(x, y),
    "fmod_": lambda L, x, y: x.fmod_(y),
    "div trunc": lambda L, x, y: x.div(y, rounding_mode="trunc"),
    "div floor": lambda L, x, y: L.div(x, y, rounding_mode="floor"),
    "broadcast zero": lambda L, x, y: x.reshape(-1, 1) % y[1:3],
    "i32": lambda L, x, y: x.to(L.int32).fmod(y.to(L.int32)),
    "u8 by a 0-d zero": lambda L, x, y: x.abs().to(L.uint8) // y[1].to(L.uint8),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", DIVISIONS)
def test_integer_division_by_a_zero_in_a_tensor_raises(name, compiled):
    check(DIVISIONS[name], I, ZERO, compiled=compiled, error=flame.ZeroDivisorError)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
def test_integer_division_by_a_python_zero_raises(op, compiled):
    check(lambda L, x: getattr(L, op)(x, 0), I, compiled=compiled, error=flame.ZeroDivisorError)
    check(lambda L, x: x.div(0, rounding_mode="trunc"), I, compiled=compiled, error=flame.ZeroDivisorError)


def test_the_zero_division_error_is_torchs_runtime_error_and_names_the_op_and_line():
    assert issubclass(flame.ZeroDivisorError, RuntimeError)
    assert issubclass(flame.ZeroDivisorError, flame.ArgumentError)
    x, y = flame.tensor(I), flame.tensor(ZERO)
    with pytest.raises(flame.ZeroDivisorError, match=r"fmod: integer division by zero(.|\n)*test_fmod_and_zero"):
        x.fmod(y)
    with pytest.raises(flame.ZeroDivisorError, match=r"remainder: integer division by zero(.|\n)*test_fmod_and_zero"):
        flame.compile(lambda a, b: (a % b) + 1)(x, y)
    with pytest.raises(flame.ZeroDivisorError, match=r"floor_divide: integer division by zero(.|\n)*test_fmod_and"):
        x // 0


def test_float_division_by_zero_stays_ieee():
    check(
        lambda L, x, y: (x // y, x % y, L.fmod(x, y), x.div(y, rounding_mode="trunc")),
        F,
        np.zeros(10, np.float32),
        compiled=True,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fmod_on_the_gpu(compiled):
    """The CUDA kernels' fmod of every dtype kind (and its gradient) is torch's; integer division by zero is
    unspecified there, as in torch's CUDA, so no zero divisor is asked of it."""
    for name in ("ints", "i8 minimum by -1", "floats", "f64", "f16 and bf16", "broadcast", "int by a float is f32"):
        f, *args = CASES[name]
        check(f, *args, compiled=compiled, atol=1e-6)
    got, want = gradients(lambda L, y: (L.fmod(L.tensor(X), y) * L.tensor(W)).sum(), Y, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_step_of_fmod_plans_and_compiles_for_the_gpu(cuda_target):
    """fmod fused with its neighbours (floats and integers, its gradient) in a step planned for the CUDA target:
    the reference executor's loss and gradient, and every kernel compiles with NVRTC for sm_90."""
    from tests.ops.test_everyday_ops import check_gpu_step

    w = flame.nn.Parameter(flame.tensor(Y.astype(np.float32)))

    def body(x, k):
        ints = (k * 7 - 20).fmod(k + 1) + (k * 3).fmod(-4)
        loss = ((x.fmod(w * 0.5 + 0.25) * 1.5 + 1.0).fmod(w) * ints.float()).sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(X.astype(np.float32)), flame.tensor(np.arange(6, dtype=np.int32)))
