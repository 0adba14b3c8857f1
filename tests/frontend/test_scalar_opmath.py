"""Binary ops between an f16 / bf16 tensor and a Python number give torch's bits, eagerly and inside
@flame.compile, values and gradients: torch's mul, true div and floor_divide compute in f32 with the number
as f32 and round once (`x * 0.3` is not `x * bf16(0.3)`), `s / x` is `x.reciprocal() * s`, bf16 `x ** 3`
rounds `x * x` first; add, sub, remainder, fmod, pow and the comparisons take the number rounded to the
tensor's dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.ir import print_graph

SCALARS = (0.3, 1 / 3, 1e-3, 2.5, 3, 0.5)
DTYPES = {"bf16": (flame.bf16, torch.bfloat16), "f16": (flame.f16, torch.float16)}

# op -> (tensor op scalar, scalar op tensor); None where torch has no such form
OPS = {
    "mul": (lambda x, s: x * s, lambda x, s: s * x),
    "div": (lambda x, s: x / s, lambda x, s: s / x),
    "add": (lambda x, s: x + s, lambda x, s: s + x),
    "sub": (lambda x, s: x - s, lambda x, s: s - x),
    "pow": (lambda x, s: x.abs() ** s, lambda x, s: s**x),
    "floor_divide": (lambda x, s: x // s, None),
    "remainder": (lambda x, s: x % s, lambda x, s: s % x),
    "fmod": (lambda x, s: x.fmod(s), None),
    "gt": (lambda x, s: x > s, lambda x, s: s > x),
    "eq": (lambda x, s: x == s, lambda x, s: s == x),
    "div_trunc": (lambda x, s: x.div(s, rounding_mode="trunc"), None),
}
DIFFERENTIABLE = {"mul", "div", "add", "sub", "pow", "remainder", "fmod"}
# torch has no derivative of remainder for its divisor. pow's gradients: torch's g * (s * x.pow(s - 1)) and
# g * (result * log(s)), the products by the Python numbers s and log(s) in f32
NO_GRADIENT = {("remainder", "scalar_op_tensor")}
CASES = [
    (op, side) for op, forms in OPS.items() for side, f in zip(("tensor_op_scalar", "scalar_op_tensor"), forms) if f
]


def _values(n: int = 2048) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32) * 4
    x[:4] = (0.0, 1.0, -2.0, 3.0)
    return x


def _bits(a) -> np.ndarray:
    """A result as f32 values (bool kept), NaNs made one value so that they compare equal."""
    a = a.detach().float().numpy() if a.dtype not in (torch.bool, flame.boolean) else a.numpy()
    return np.where(np.isnan(a), np.float32(np.nan), a) if a.dtype.kind == "f" else a


def _same(got, want, what: str) -> None:
    g, w = _bits(got), _bits(want)
    bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} differ from torch, e.g. at {np.nonzero(bad)[0][:5]}"


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,side", CASES)
def test_scalar_op_matches_torch_bits(op, side, dtype, compiled):
    fdt, tdt = DTYPES[dtype]
    f = OPS[op][side == "scalar_op_tensor"]
    x = _values()
    g = np.random.default_rng(1).standard_normal(x.size).astype(np.float32)
    for s in SCALARS:
        grad = op in DIFFERENTIABLE and (op, side) not in NO_GRADIENT
        tx = torch.tensor(x).to(tdt).requires_grad_(grad)
        want = f(tx, s)
        fx = flame.tensor(x).to(fdt).requires_grad_(grad)

        def body(x, g, s=s, grad=grad):
            y = f(x, s)
            return (y, flame.autograd.grad(y, x, grad_outputs=g)[0]) if grad else (y, None)

        y, gx = (flame.compile(body) if compiled else body)(fx, flame.tensor(g).to(fdt))
        _same(y, want, f"{op} {side} {dtype} s={s!r}")
        if grad:
            (tg,) = torch.autograd.grad(want, tx, grad_outputs=torch.tensor(g).to(tdt))
            _same(gx, tg, f"gradient of {op} {side} {dtype} s={s!r}")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("e", [2, 3, -2, 0.5, -0.5])
def test_bf16_integer_powers_round_as_torch(e, compiled):
    """torch's bf16 x ** 3 is (x * x rounded) * x, x ** -2 is 1 / (x * x rounded); gradients as pow's."""
    x = np.abs(_values()) + np.float32(0.01)
    g = np.random.default_rng(2).standard_normal(x.size).astype(np.float32)
    tx = torch.tensor(x).to(torch.bfloat16).requires_grad_()
    want = tx**e
    (tg,) = torch.autograd.grad(want, tx, grad_outputs=torch.tensor(g).to(torch.bfloat16))

    def body(x, g):
        y = x**e
        return y, flame.autograd.grad(y, x, grad_outputs=g)[0]

    fx = flame.tensor(x).to(flame.bf16).requires_grad_()
    y, gx = (flame.compile(body) if compiled else body)(fx, flame.tensor(g).to(flame.bf16))
    _same(y, want, f"bf16 x ** {e}")
    _same(gx, tg, f"gradient of bf16 x ** {e}")


def test_exact_scalar_keeps_the_op_in_its_dtype():
    """A number the dtype holds exactly (0.5, 3) gives the same bits either way: the traced graph keeps
    the op in bf16 with no cast to f32; an inexact one (0.3) is one f32 product, cast back once."""
    exact = print_graph(flame.compile(lambda x: x * 0.5 + x * 3).trace(flame.ones(8, dtype=flame.bf16)))
    assert "f32" not in exact
    inexact = print_graph(flame.compile(lambda x: x * 0.3).trace(flame.ones(8, dtype=flame.bf16)))
    assert inexact.count("cast") == 2 and "f32" in inexact




@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_number_over_tensor_is_reciprocal_times_number(dtype, compiled):
    """`s / x` is torch's `x.reciprocal() * s` in f32 and f64 too (and of an integer tensor, in the default
    float dtype): true division gives other bits for about a quarter of f32 values; the gradient too."""
    x = np.random.default_rng(2).uniform(0.1, 5, 4096)
    x = np.round(x * 9) if dtype == "int64" else x
    g = np.random.default_rng(3).standard_normal(x.size)
    floating = dtype != "int64"
    for s in (3.0, 0.3, 7, -1e-3):
        tx = torch.tensor(x.astype(dtype)).requires_grad_(floating)
        want = s / tx
        fx = flame.tensor(x.astype(dtype)).requires_grad_(floating)

        def body(x, g, s=s):
            y = s / x
            return (y, flame.autograd.grad(y, x, grad_outputs=g)[0]) if floating else (y, None)

        gf = flame.tensor(g.astype(dtype if floating else "float32"))
        y, gx = (flame.compile(body) if compiled else body)(fx, gf)
        assert y.dtype.name == {"float32": "f32", "float64": "f64", "int64": "f32"}[dtype]
        assert np.array_equal(y.numpy(), want.detach().numpy()), f"s={s!r}"
        if floating:
            (tg,) = torch.autograd.grad(want, tx, grad_outputs=torch.tensor(g.astype(dtype)))
            assert np.array_equal(gx.numpy(), tg.numpy()), f"gradient, s={s!r}"
