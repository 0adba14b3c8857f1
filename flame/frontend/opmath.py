"""PyTorch's rounding of half-precision (f16 / bf16) arithmetic: its kernels compute in the op's *opmath*
type (f32) and round the result once, and its backward kernels do the same. Here: binary ops with a
Python number (`in_opmath`), the fused pointwise ops (`fused`, `with_alpha`: add/sub with alpha, addcmul,
addcdiv, lerp), composites of pointwise ops (`composite`: the activations), gradients of PyTorch's backward
formulas (`with_derivative`, `wants_gradient`), and var / std (and the mean var_mean / std_mean return).

PyTorch's kernels for `mul`, true `div` and `floor_divide` of an f16 / bf16 tensor by a Python number
compute in f32, with the number converted to f32, and round the result once: `x * 0.3` is
`(f32(x) * f32(0.3)).to(bf16)`, not `x * bf16(0.3)` (the `scalar_opmath` trait on those ops' declarations).
Its other ops with such a number (add, sub, remainder, fmod, pow, the comparisons, maximum / minimum) take
the number rounded to the tensor's dtype first, which is what an op on a `full` of that dtype computes. A
number the tensor's dtype holds exactly (0.5, 2.0, small integers) gives the same bits either way, and
keeps the op in the tensor's dtype.

`s / x` is PyTorch's `x.reciprocal() * s` (Tensor.__rtruediv__), in every floating dtype: the reciprocal
rounded, then the product as above (f32 and f64: with the number rounded to the dtype). bf16 `x ** 3`
and `x ** -2` are PyTorch's CPU kernels' `x * x * x` and `1 / (x * x)`, each product rounded to bf16
(f16 and every other exponent: one pow, rounded once).
"""

from __future__ import annotations

import functools

import numpy as np

from flame.errors import ArgumentTypeError
from flame.frontend.autocast import policy
from flame.frontend.context import current_trace, grad_enabled, user_location
from flame.frontend.default_dtype import as_floating
from flame.frontend.dispatch import apply
from flame.frontend.promotion import is_scalar, result_type
from flame.frontend.tensor import Tensor, reduce_axes
from flame.ir.dtypes import DType, bf16, boolean, f16, f32
from flame.ir.registry import get


def _exact_in(s: float, dt: DType) -> bool:
    """Whether the f32 value of the Python number s is a value of the half-precision dtype dt."""
    v = np.float32(s)
    if not np.isfinite(v):
        return True
    if dt == f16:
        return bool(np.float16(v) == v)
    return int(np.array(v).view(np.uint32)) & 0xFFFF == 0  # bf16 is f32's upper half


def _is_number(x) -> bool:
    return not isinstance(x, Tensor) and is_scalar(x)


def _cast(x: Tensor, dt: DType) -> Tensor:
    return x if x.dtype == dt else apply("cast", x, dtype=dt)


def in_opmath(name: str, a, b, dt: DType) -> Tensor | None:
    """op `name` of a (Tensor or number) and b, of result dtype dt, as PyTorch computes it where one operand
    is a Python number and dt is f16 or bf16 (see the module's docstring); None where the op takes its
    usual path (the number rounded to dt)."""
    if name == "div" and _is_number(a) and isinstance(b, Tensor) and dt.is_float:  # s / x: x.reciprocal() * s
        r = apply("reciprocal", _cast(b, dt))
        out = in_opmath("mul", r, a, dt)
        return apply("mul", r, float(a)) if out is None else out
    if dt not in (f16, bf16):
        return None
    if name == "pow" and dt == bf16 and isinstance(a, Tensor) and _is_number(b) and float(b) in (3.0, -2.0):
        x = _cast(a, dt)
        sq = apply("mul", x, x)
        value = apply("mul", sq, x) if float(b) == 3.0 else apply("reciprocal", sq)
        if not wants_gradient(x):
            return value
        # the value of the products, the gradient of pow's (PyTorch's pow_backward: g * (3 * x.pow(2)))
        return apply("straight_through", apply("pow", x, float(b)), apply("stop_gradient", value))
    if name == "pow":
        return _pow_with_number(a, b, dt)
    if not get(name).scalar_opmath:  # the op's trait: PyTorch reads the number in f32
        return None
    scalar, tensor = (a, b) if _is_number(a) else (b, a)
    if name == "floor_divide" and scalar is a:  # s // x: PyTorch's kernel rounds s to dt
        return None
    if not (_is_number(scalar) and isinstance(tensor, Tensor)) or _exact_in(float(scalar), dt):
        return None
    wide = _cast(tensor, f32)
    s = float(np.float32(float(scalar)))
    out = apply(name, s, wide) if scalar is a else apply(name, wide, s)
    return apply("cast", out, dtype=dt)


def _pow_with_number(a, b, dt: DType) -> Tensor | None:
    """x ** s or s ** x of an f16 / bf16 tensor x whose gradient may be taken: the value as the usual path
    computes it (s rounded to dt), the gradient PyTorch's pow_backward with s read as a Python number:
    g * (s * x.pow(s - 1)) and g * (result * log(s)), each product by the number in f32, rounded once.
    None where that is the usual path's gradient too (an exponent dt holds exactly; a base of 0) or no
    gradient is taken."""
    base = _is_number(a)
    s, x = (a, b) if base else (b, a)
    if not (_is_number(s) and isinstance(x, Tensor) and wants_gradient(x)):
        return None
    s = float(s)
    if (not base and _exact_in(s, dt)) or (base and s == 0.0) or not np.isfinite(s):
        return None
    x = _cast(x, dt)
    if base:
        value = apply("pow", rounded(s, dt), x)
        log_s = float(np.log(s)) if s > 0 else float("nan")  # a negative base: NaN, as torch's
        d = _scalar_product(value, log_s, dt)
    else:
        value = apply("pow", x, rounded(s, dt))
        d = _scalar_product(apply("pow", x, rounded(s - 1.0, dt)), s, dt)
    return with_derivative(x, value, _cast(d, f32))


@policy("f32", cpu="")  # autocast: pow, on PyTorch's CUDA float32 list; on none of its CPU lists
def half_power(x: Tensor, exponent: float) -> Tensor:
    """x ** 0.5 or x ** -0.5 for a Python number exponent, as PyTorch's CUDA pow kernel computes them (its CPU
    kernel too, but for f16): sqrt and rsqrt, so sqrt(-0.0) is -0.0, rsqrt(-0.0) -inf and both NaN at -inf,
    where C's pow gives +0.0, +inf, inf and 0. The gradient is PyTorch's pow_backward, exponent *
    x.pow(exponent - 1), whose pow by -0.5 is its rsqrt again."""
    x = as_floating(x)
    value = apply("sqrt" if exponent == 0.5 else "rsqrt", x)
    if not wants_gradient(x):
        return value
    # x.pow(exponent - 1) in x's dtype (rounded, as torch's autograd computes it), times the exact exponent
    d = apply("mul", apply("rsqrt", x), 0.5) if exponent == 0.5 else apply("mul", apply("pow", x, -1.5), -0.5)
    return with_derivative(x, value, wide(d))


def _scalar_product(t: Tensor, s: float, dt: DType) -> Tensor:
    """t * s for a Python number s, as PyTorch's mul computes it (in f32 where s is inexact in dt)."""
    out = in_opmath("mul", t, s, dt)
    return apply("mul", t, s) if out is None else out


def is_one(s) -> bool:
    """Whether a multiplier (alpha, value) is the Python number 1; a tensor given as one never is (its
    value is not known while tracing)."""
    return not isinstance(s, Tensor) and s == 1


def rounded(s, dt: DType):
    """The Python number s as a value of the floating dtype dt (a float), s itself for other dtypes. A
    0-d tensor (an alpha given as one, as torch takes it) is its value in dt, without its history."""
    if not dt.is_float or isinstance(s, (bool, np.bool_)):
        return s
    if isinstance(s, Tensor):
        return s.detach().to(dt)
    return float(np.asarray(s, np.float64).astype(dt.np_dtype))


def fused(fn, *operands):
    """fn(*operands) as PyTorch's fused pointwise kernels compute it (add and sub with alpha, addcmul,
    addcdiv, lerp): where the result's dtype is f16 or bf16, in f32 (the tensors widened, Python
    numbers as f32) and rounded once; else fn(*operands) as it is. Without the widening, each product
    and sum rounds to the half-precision dtype (`p.add_(g, alpha=-lr)` on bf16 differed from torch in
    a quarter of the elements). As torch's kernels, the tensors are first converted to the result's dtype:
    an integer beside a wider one (u8 * alpha, the abs of an int64 minimum) must not wrap in its own."""
    dt = result_type(*operands)
    operands = [_cast(x, dt) if isinstance(x, Tensor) else x for x in operands]
    if dt not in (f16, bf16):
        return fn(*operands)
    return _cast(fn(*(_cast(x, f32) if isinstance(x, Tensor) else x for x in operands)), dt)


def with_alpha(fn, x, y, alpha):
    """fn(x, y, alpha) for add and sub with alpha, as torch: the value in f32 with alpha read in the result's
    dtype, rounded once (`fused`); the gradients those of fn(x, y, alpha) (y's: the cotangent times alpha,
    in f32 with alpha as f32, rounded once)."""
    dt = result_type(x, y)
    a = bool(alpha) if dt == boolean else rounded(alpha, dt)  # bool: alpha is True or False, as torch's
    value = fused(lambda u, v: fn(u, v, a), x, y)
    if result_type(x, y) not in (f16, bf16) or not any(isinstance(t, Tensor) and wants_gradient(t) for t in (x, y)):
        return value
    return apply("straight_through", fn(x, y, alpha), value)


def composite(fn):
    """Decorator for a composite of pointwise ops (an activation, log1p) whose first argument is its
    tensor: an f16 / bf16 tensor is widened to f32, fn runs on it and the result is rounded once to the
    tensor's dtype, as PyTorch's pointwise kernels compute in f32 ("opmath"); the gradient is
    autodiff's of the f32 ops, rounded once where it leaves them, as PyTorch's backward kernels. Other
    dtypes run fn as it is. Without it each intermediate rounds to the half-precision dtype (bf16 mish
    differed from torch in three elements of ten)."""

    @functools.wraps(fn)
    def run(x, *args, **kwargs):
        if not isinstance(x, Tensor) or x.dtype not in (f16, bf16):
            return fn(x, *args, **kwargs)
        return _cast(fn(_cast(x, f32), *args, **kwargs), x.dtype)

    return run


def wants_gradient(x: Tensor) -> bool:
    """Whether a gradient of x may be taken through what is computed from it now: gradients on, and x
    traced (autodiff drops what no gradient reads) or requiring grad; a gradient form (straight_through's
    first operand) is built only then, so eager inference computes none."""
    return grad_enabled.get() and (current_trace.get() is not None or x.requires_grad)


def float_gradient(x) -> bool:
    """x is a floating tensor whose gradient may be taken (`wants_gradient`): where an op builds PyTorch's
    backward formula as its gradient form in every floating dtype."""
    return isinstance(x, Tensor) and x.dtype.is_float and wants_gradient(x)


def half_gradient(x) -> bool:
    """x is an f16 / bf16 tensor whose gradient may be taken (`wants_gradient`): where a half-precision
    op builds PyTorch's backward formula as its gradient form."""
    return isinstance(x, Tensor) and x.dtype in (f16, bf16) and wants_gradient(x)


def evenly_distributed(x: Tensor, value: Tensor) -> Tensor:
    """value, the max() or min() of all of x, with PyTorch's evenly_distribute_backward as its gradient: the
    cotangent shared evenly among the elements equal to value, or among the NaNs where value is NaN (where
    amax's gradient, shared among the elements equal to value, is NaN everywhere)."""
    if not float_gradient(x):
        return value
    t, v = x.detach(), value.detach()
    hit = ((t == v) | ((t != t) & (v != v))).to(x.dtype)
    return apply("straight_through", _cast((x * (hit / hit.sum())).sum(), value.dtype), value)


def wide(x: Tensor) -> Tensor:
    """x in its opmath dtype: f32 for f16 / bf16, its own dtype otherwise."""
    return _cast(x, f32) if x.dtype in (f16, bf16) else x


def with_derivative(x: Tensor, value: Tensor, d: Tensor) -> Tensor:
    """value (of x's dtype), whose gradient to x is the cotangent times d (of x's shape, in x's opmath
    dtype: f32 for f16 / bf16), computed in that dtype and rounded once: a PyTorch backward kernel that
    computes from saved values. d is only read by the gradient (dead code where none is taken)."""
    return apply("straight_through", _cast(wide(x) * d.detach(), x.dtype), value)


def with_derivative_inside(x: Tensor, value: Tensor, inside: Tensor, d: Tensor | float = 1.0) -> Tensor:
    """value (of x's dtype), whose gradient to x is the cotangent times d where `inside` holds and 0
    elsewhere: a select, as torch's backward kernels of the ops flat outside a range (hardtanh_backward,
    hardsigmoid_backward, hardswish_backward, logit_backward with eps), so an infinite or NaN cotangent
    gives 0 where the op is flat, not the NaN of a product with 0 (with_derivative's)."""
    w = wide(x)
    # the select first, then d: the backward multiplies by d and then selects, so a d that is infinite where
    # the op is flat (logit's 1 / (x (1 - x)) at 0) gives 0 there too
    chosen = apply("where", inside.detach(), w, apply("full", shape=(), value=0.0, dtype=w.dtype))
    return apply("straight_through", _cast(chosen * (d.detach() if isinstance(d, Tensor) else d), x.dtype), value)



def var_correction(op: str, dim, unbiased, correction, keepdim: bool = False) -> tuple:
    """(dim, correction) of var / std / var_mean / std_mean called as torch's: a bool where the dim goes is
    the `unbiased` of torch's var(input, unbiased) form (over every element), which takes no other
    argument; unbiased and correction are not given together; the correction defaults to 1 (Bessel's),
    unbiased=False meaning 0."""
    if isinstance(dim, (bool, np.bool_)):
        if unbiased is not None or correction is not None or keepdim:
            raise ArgumentTypeError(f"{op}(): a bool in place of dim is torch's unbiased argument of "
                                    f"{op}(input, unbiased), which takes no other argument\n  at {user_location()}")
        dim, unbiased = None, bool(dim)
    if unbiased is not None and correction is not None:
        raise ArgumentTypeError(f"{op}: give unbiased or correction, not both\n  at {user_location()}")
    return dim, correction if correction is not None else (1 if unbiased is None else int(bool(unbiased)))


def _f32_var(x: Tensor, axes, keepdim: bool, dof: float) -> Tensor:
    w = x.float()
    d = w - w.mean(axes, keepdim=True)
    return (d * d).sum(axes, keepdim=keepdim) / float(dof)


def _var_form(x: Tensor, axes, keepdim: bool, dof: float) -> Tensor:
    """A value whose gradient is PyTorch's var_backward, ops of x's dtype: (2 / dof) * grad * (x - x.mean())."""
    dev = (x - x.mean(axes, keepdim=True)).detach()
    return (x * dev).sum(axes, keepdim=keepdim) * (2.0 / dof)


def rounded_var(x: Tensor, axes, keepdim: bool, dof: float) -> Tensor:
    """An f16 / bf16 variance as PyTorch's: in f32, rounded once; its gradient PyTorch's formula (_var_form),
    the gradient of a form whose value is not used (straight_through)."""
    value = _f32_var(x, axes, keepdim, dof).to(x.dtype)
    if not wants_gradient(x):
        return value
    return apply("straight_through", _var_form(x, axes, keepdim, dof), value)


def rounded_std(x: Tensor, axes, keepdim: bool, dof: float) -> Tensor:
    """An f16 / bf16 standard deviation as PyTorch's: the square root of the f32 variance, rounded once;
    its gradient PyTorch's std_backward, var's for grad / (2 * std), 0 where std is 0."""
    value = _f32_var(x, axes, keepdim, dof).sqrt().to(x.dtype)
    if not wants_gradient(x):
        return value
    twice = (value * 2.0).detach()
    zero = twice == 0
    form = _var_form(x, axes, keepdim, dof)
    return apply("straight_through", apply("where", zero, form * 0.0, form / apply("where", zero, 1.0, twice)), value)


def welford_mean(x: Tensor, dim, keepdim: bool) -> Tensor:
    """The mean of var_mean / std_mean as PyTorch's: its Welford update carries the mean through the elements
    in order, and after an inf or NaN every later element turns it NaN (inf - inf), so the mean is +-inf only
    where the one non-finite element is the last (the largest index on every reduced dim) and NaN wherever
    one sits elsewhere (mean() gives +-inf there). The gradient is mean()'s."""
    axes = reduce_axes(dim, x.ndim, "var_mean")
    mean = x.mean(axes, keepdim=keepdim)
    if not x.dtype.is_float or any(x.shape[a] == 0 for a in axes):
        return mean
    bad = (~x.isfinite()).int()
    last = bad
    for a in axes:
        last = last.narrow(a, x.shape[a] - 1, 1)
    value = apply("where", bad.sum(axes, keepdim=keepdim) > last.sum(axes, keepdim=keepdim), float("nan"), mean)
    return apply("straight_through", mean, value.detach()) if wants_gradient(x) else value


def stat_and_mean(op: str, x: Tensor, dim, unbiased, keepdim: bool, correction) -> tuple:
    """(var, mean) for op "var_mean", (std, mean) for "std_mean", with torch's arguments (var_correction)."""
    dim, c = var_correction(op, dim, unbiased, correction, keepdim)
    spread = x.var if op == "var_mean" else x.std
    return spread(dim, keepdim=keepdim, correction=c), welford_mean(x, dim, keepdim)
