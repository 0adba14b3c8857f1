"""Elementwise primitives: unary math, binary arithmetic with NumPy broadcasting, comparisons,
where, cast. Gradients of piecewise-constant ops (floor, ceil, round, sign) and comparisons are
none (treated as zero), as in PyTorch."""

from __future__ import annotations

import math

import numpy as np

from flame.errors import DTypeError, ZeroDivisorError
from flame.ir.dtypes import boolean, f32
from flame.ir.memo import exact_memo
from flame.ir.ops._erf import erf_narrow
from flame.ir.ops._shapes import broadcast_shapes
from flame.ir.registry import REQUIRED, Attr, OpDef, check_dtype, get, register
from flame.ir.types import TensorType

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@exact_memo
def _erf_ref(x):
    # vectorised (math.erf through np.vectorize was 45% of a small GELU model's CPU step); f32 and
    # narrower through whole-array polynomials in f64 (_erf.py: SciPy's rounded results, at a fraction
    # of its scalar loop's time), f64 through SciPy; either way the accurate side of every comparison
    if x.dtype != np.float64 and x.dtype.itemsize <= 4:
        return erf_narrow(x)
    from scipy import special  # here: importing SciPy's special functions is a sixth of `import flame`

    return special.erf(x.astype(np.float64, copy=False)).astype(x.dtype, copy=False)


def _erfc_ref(x):
    from scipy import special  # here: see _erf_ref

    return special.erfc(x.astype(np.float64, copy=False)).astype(x.dtype, copy=False)


def _sigmoid_ref(x):
    """1 / (1 + exp(-x)), PyTorch's form: a tiny positive value far below 0 (sigmoid(-40) is 4.2e-18, so
    log(sigmoid(x)) stays finite), where 0.5 * (1 + tanh(x / 2)) cancels to 0 from x < -17 in f32."""
    with np.errstate(over="ignore"):  # exp(-x) = inf gives 0, as it should
        return 1.0 / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """GELU in its tanh form (GELU(approximate="tanh"), cuBLASLt's GELU epilogue)."""
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def _gelu_ref(x, approximate):
    if approximate == "tanh":
        return gelu_tanh(x)
    return 0.5 * x * (1.0 + _erf_ref(x * INV_SQRT_2))


def _opmath(vjp):
    """A VJP of several ops evaluated in f32 for 16-bit float inputs, rounded once at the end: what
    PyTorch's backward kernels do (their "opmath" type). Rounding each intermediate to bf16 instead
    costs accuracy, and as many conversions per element as there are ops (the erf-GELU backward of a
    bf16 MLP was compute-bound at about half the copy bandwidth on an H100)."""

    def run(b, g, x, y, **attrs):
        if x.dtype.itemsize >= 4:
            return vjp(b, g, x, y, **attrs)
        up = [b.cast(v, dtype=f32) for v in (g, x, y)]
        return tuple(None if d is None else b.cast(d, dtype=x.dtype) for d in vjp(b, *up, **attrs))

    run.__doc__ = vjp.__doc__
    return run


def _gelu_vjp(b, g, x, y, approximate):
    if approximate == "tanh":
        x2 = b.mul(x, x)
        t = b.tanh(b.mul(b.add(x, b.mul(b.mul(x2, x), 0.044715)), SQRT_2_OVER_PI))
        du = b.mul(b.add(b.mul(x2, 3 * 0.044715), 1.0), SQRT_2_OVER_PI)
        d = b.add(b.mul(b.add(t, 1.0), 0.5), b.mul(b.mul(b.mul(x, 0.5), b.sub(1.0, b.mul(t, t))), du))
        return (b.mul(g, d),)
    cdf = b.mul(b.add(b.erf(b.mul(x, INV_SQRT_2)), 1.0), 0.5)
    pdf = b.mul(b.exp(b.mul(b.mul(x, x), -0.5)), INV_SQRT_2PI)
    return (b.mul(g, b.add(cdf, b.mul(x, pdf))),)


def _silu_vjp(b, g, x, y):
    s = b.sigmoid(x)
    return (b.mul(g, b.mul(s, b.add(b.mul(x, b.sub(1.0, s)), 1.0))),)


def _unary_infer(name, kinds):
    def infer(types):
        check_dtype(name, types[0], kinds)
        return types[0]
    return infer


def unary(name, ref, vjp=None, kinds=("float",), nondiff="", attrs=None, doc="", autocast="", cost="", **traits):
    """Declare a unary elementwise op (same type in and out); traits: further OpDef traits."""
    return register(OpDef(name, "elementwise", 1, lambda types, **a: _unary_infer(name, kinds)(types),
                          ref, attrs or {}, vjp, nondiff, compute_f32=True, doc=doc, autocast=autocast, cost=cost,
                          **traits))


_NUM = ("float", "int")
_PIECEWISE = "piecewise constant: gradient is zero almost everywhere (none)"


def _zero_vjp(b, g, x, y):
    """A piecewise-constant op's gradient as torch's: zeros (its result requires grad, as torch's does)."""
    return (b.zeros_like(g),)

unary("neg", np.negative, lambda b, g, x, y: (b.neg(g),), kinds=_NUM, conversion=True, sign_only=True)
unary("abs", np.abs, lambda b, g, x, y: (b.mul(g, b.sign(x)),), kinds=_NUM, conversion=True)
_LIBM, _IEEE = "transcendental", "division"  # OpDef.cost
_F32 = {"autocast": "f32", "autocast_cpu": ""}  # on PyTorch's CUDA float32 list, on none of its CPU lists
unary("exp", np.exp, lambda b, g, x, y: (b.mul(g, y),), **_F32, cost=_LIBM)
unary("log", np.log, lambda b, g, x, y: (b.div(g, x),), **_F32, cost=_LIBM,
      row_kernels=((("max", "sum"), "log_softmax"),))
unary("sqrt", np.sqrt, lambda b, g, x, y: (b.div(g, b.mul(y, 2.0)),), cost=_IEEE)
unary("rsqrt", lambda x: 1.0 / np.sqrt(x),  # d x^-1/2 = -y^3/2
      _opmath(lambda b, g, x, y: (b.mul(g, b.mul(b.mul(b.mul(y, y), y), -0.5)),)), **_F32, cost=_IEEE,
      row_kernels=((("mean", "mean"), "layer_norm"), (("mean",), "rms_norm")))
unary("reciprocal", lambda x: 1.0 / x, lambda b, g, x, y: (b.neg(b.mul(g, b.mul(y, y))),), **_F32,
      cost=_IEEE)
unary("sin", np.sin, lambda b, g, x, y: (b.mul(g, b.cos(x)),), cost=_LIBM)
unary("cos", np.cos, lambda b, g, x, y: (b.neg(b.mul(g, b.sin(x))),), cost=_LIBM)
unary("tanh", np.tanh, _opmath(lambda b, g, x, y: (b.mul(g, b.sub(1.0, b.mul(y, y))),)), cost=_LIBM)  # 1 - y^2
unary("sigmoid", _sigmoid_ref, _opmath(lambda b, g, x, y: (b.mul(g, b.mul(y, b.sub(1.0, y))),)), cost=_LIBM)
unary("erf", _erf_ref,
      _opmath(lambda b, g, x, y: (b.mul(g, b.mul(b.exp(b.neg(b.mul(x, x))), TWO_OVER_SQRT_PI)),)), cost=_LIBM)
# the inverse trigonometric and hyperbolic functions and erfc: libm's values (NaN outside their domains),
# PyTorch's derivative formulas (derivatives.yaml), evaluated in f32 for 16-bit inputs
unary("asin", np.arcsin, _opmath(lambda b, g, x, y: (b.mul(g, b.rsqrt(b.sub(1.0, b.mul(x, x)))),)), **_F32,
      cost=_LIBM)
unary("acos", np.arccos, _opmath(lambda b, g, x, y: (b.neg(b.mul(g, b.rsqrt(b.sub(1.0, b.mul(x, x))))),)),
      **_F32, cost=_LIBM)
unary("atan", np.arctan, _opmath(lambda b, g, x, y: (b.div(g, b.add(b.mul(x, x), 1.0)),)), cost=_LIBM)
unary("asinh", np.arcsinh, _opmath(lambda b, g, x, y: (b.mul(g, b.rsqrt(b.add(b.mul(x, x), 1.0))),)), cost=_LIBM)
unary("acosh", np.arccosh, _opmath(lambda b, g, x, y: (b.mul(g, b.rsqrt(b.sub(b.mul(x, x), 1.0))),)), cost=_LIBM)
unary("atanh", np.arctanh, _opmath(lambda b, g, x, y: (b.div(g, b.sub(1.0, b.mul(x, x))),)), cost=_LIBM)
# torch's formulas, reading what its nodes save: expm1's and tan's the result, sinh's and cosh's the input
unary("expm1", np.expm1, lambda b, g, x, y: (b.mul(g, b.add(y, 1.0)),), **_F32, cost=_LIBM,
      doc="exp(x) - 1, accurate for small x")
unary("tan", np.tan, lambda b, g, x, y: (b.mul(g, b.add(b.mul(y, y), 1.0)),), **_F32, cost=_LIBM)
unary("sinh", np.sinh, lambda b, g, x, y: (b.mul(g, b.cosh(x)),), **_F32, cost=_LIBM)
unary("cosh", np.cosh, lambda b, g, x, y: (b.mul(g, b.sinh(x)),), **_F32, cost=_LIBM)
unary("erfc", _erfc_ref,
      _opmath(lambda b, g, x, y: (b.mul(g, b.mul(b.exp(b.neg(b.mul(x, x))), -TWO_OVER_SQRT_PI)),)), cost=_LIBM,
      doc="1 - erf(x) without the cancellation: accurate in the tail where erf rounds to 1, as torch.erfc")
unary("relu", lambda x: np.where(x < 0, 0, x).astype(x.dtype),  # -0.0 stays -0.0, as torch's and the kernel's
      lambda b, g, x, y: (b.where(b.le(y, 0), 0, g),), kinds=_NUM,  # y <= 0 exactly where x <= 0: the backward
      # reads the result, which the next layer keeps anyway; a NaN passes the gradient, as torch's
      epilogue="relu")
unary("gelu", _gelu_ref, _opmath(_gelu_vjp), attrs={"approximate": Attr("str", "none", ("none", "tanh"))}, cost=_LIBM,
      epilogue="gelu")  # cuBLASLt's GELU is the tanh form only
unary("silu", lambda x: x * _sigmoid_ref(x), _opmath(_silu_vjp), cost=_LIBM)
unary("leaky_relu", lambda x, negative_slope: np.where(x > 0, x, x * negative_slope),
      _opmath(lambda b, g, x, y, negative_slope: (b.where(b.gt(x, 0), g, b.mul(g, negative_slope)),)),
      attrs={"negative_slope": Attr("float", 0.01)})
unary("floor", np.floor, _zero_vjp, kinds=_NUM)
unary("ceil", np.ceil, _zero_vjp, kinds=_NUM)
unary("round", np.round, _zero_vjp, kinds=_NUM, doc="half to even, like torch.round")
unary("sign", lambda x: ((x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)).astype(x.dtype), _zero_vjp, kinds=_NUM,
      doc="1, -1 or 0 (also for -0.0 and NaN), as torch.sign")
STOP_GRADIENT = unary("stop_gradient", np.copy, kinds=("float", "int", "bool"),
      nondiff="the identity that gradients do not flow through (Tensor.detach); removed after autodiff",
      doc="x, with no gradient: what Tensor.detach() records while tracing")


def _binary_infer(name, kinds, out_dtype=None):
    def infer(types):
        a, b = types
        if a.dtype != b.dtype:
            raise DTypeError(f"{name} {a}, {b}: dtypes differ ({a.dtype} vs {b.dtype}); cast one first")
        check_dtype(name, a, kinds)
        return TensorType(broadcast_shapes(name, types), out_dtype or a.dtype)
    return infer


def binary(name, ref, vjp=None, kinds=_NUM, out_dtype=None, nondiff="", autocast="", cost="", **traits):
    """Declare a binary elementwise op with NumPy broadcasting; both inputs share one dtype; traits:
    further OpDef traits."""
    rule = _binary_infer(name, kinds, out_dtype)
    return register(OpDef(name, "elementwise", 2, lambda types: rule(types), ref, {}, vjp, nondiff,
                          compute_f32=True, autocast=autocast, cost=cost, **traits))


def _minmax_vjp(pick):
    """PyTorch's: g to the operand picked, half to each of a tie, and g to both where neither compares
    (a NaN; its gradient is the NaN's)."""
    def vjp(b, g, x, y, out):
        share = b.where(b.eq(x, y), b.mul(g, 0.5), g)
        return b.where(pick(b, y, x), 0, share), b.where(pick(b, x, y), 0, share)
    return vjp


def _power(x, y):
    """IEEE pow (C's powf: pow(-inf, 0.5) = inf, pow(-0.0, 0.5) = +0.0) whatever the exponent's shape:
    NumPy computes an exponent of 0.5 that is a scalar or a broadcast (stride-0) operand as sqrt, so
    such an exponent is materialised first. An exponent of 2 gives x * x (the correctly rounded square, as
    PyTorch's pow kernels compute a scalar 2, and simplify_algebra's rewrite of a constant 2)."""
    x, y = np.asarray(x), np.asarray(y)
    shape = np.broadcast_shapes(x.shape, y.shape)
    if y.ndim == 0 or 0 in y.strides:
        y = np.array(np.broadcast_to(y, shape or (1,)))
    out = np.power(x.reshape(x.shape or (1,)), y).reshape(shape)
    two = np.broadcast_to(y.reshape(y.shape if shape else ()) == 2, shape)
    return np.where(two, x * x, out) if two.any() else out


def _int_power(x, y):
    """Integer pow as PyTorch's: exact, wrapping on overflow; a negative exponent gives 0 except for bases
    1 (1) and -1 (+-1 by the exponent's parity)."""
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    out, base, e = np.ones(x.shape, x.dtype), x.copy(), np.where(y > 0, y, 0).astype(np.int64)
    with np.errstate(over="ignore"):
        while e.any():
            out = np.where(e & 1, out * base, out).astype(x.dtype)
            base = (base * base).astype(x.dtype)
            e >>= 1
    neg = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 1, -1, 1), 0)).astype(x.dtype) \
        if x.dtype.kind == "i" else np.where(x == 1, 1, 0).astype(x.dtype)
    return np.where(y < 0, neg, out).astype(x.dtype) if y.dtype.kind == "i" else out


def _power_any(x, y):
    return _int_power(x, y) if np.asarray(x).dtype.kind in "iu" else _power(x, y)


def _pow_vjp(b, g, x, y, out):
    """PyTorch's pow_backward: x's gradient g * y * x ** (y - 1), 0 where y is 0; y's g * out * log(x), 0
    where x is 0 and y >= 0, NaN where x is negative (no real derivative: torch's NaN, not a silent 0)."""
    gx = b.where(b.eq(y, 0), 0, b.mul(g, b.mul(y, b.pow(x, b.sub(y, 1.0)))))
    gy = b.where(b.logical_and(b.eq(x, 0), b.ge(y, 0)), 0, b.mul(g, b.mul(out, b.log(x))))
    return gx, gy


def _integer_division(name, fn):
    """The reference of an integer-or-float division `name` computing fn(x, y): an integer divisor holding
    a zero that reaches the result raises ZeroDivisorError naming the op, as PyTorch's CPU kernels raise
    (a float one divides as IEEE does). The CUDA kernels check nothing: there, as in PyTorch's CUDA, the
    result of an integer division by zero is unspecified."""

    def ref(x, y):
        y = np.asarray(y)
        if y.dtype.kind in "iu" and np.broadcast(x, y).size and not np.all(y):
            raise ZeroDivisorError(f"{name}: integer division by zero (torch: RuntimeError: ZeroDivisionError)")
        return fn(x, y)

    ref.__name__ = ref.__qualname__ = f"{name}_ref"
    return ref


def _trunc(b, q):
    """q rounded toward zero, of IR values (the quotient of torch's div(rounding_mode="trunc"))."""
    return b.where(b.lt(q, 0), b.ceil(q), b.floor(q))


def _int_div_ref(x, y):
    return np.true_divide(x, y)


ADD = binary("add", np.add, lambda b, g, x, y, out: (g, g), commutative=True, on_bool="logical_or", sign_only=True,
             epilogue="bias")
binary("sub", np.subtract, lambda b, g, x, y, out: (g, b.neg(g)), sign_only=True)
MUL = binary("mul", np.multiply, lambda b, g, x, y, out: (b.mul(g, y), b.mul(g, x)), commutative=True,
             on_bool="logical_and", sign_only=True, scalar_opmath=True)
# d/dy = -g * (x / y) / y, from the inputs as torch's node (which saves them, not the result: a write into
# the quotient leaves its backward as it is)
DIV = binary("div", _int_div_ref, lambda b, g, x, y, out: (b.div(g, y), b.neg(b.mul(g, b.div(b.div(x, y), y)))),
       kinds=("float",), cost=_IEEE, row_kernels=((("max", "sum"), "softmax"),), scalar_opmath=True)
def _pow_saves(op, needs):
    """torch's PowBackward0 (a number exponent: a constant here) saves self; PowBackward1 (a tensor
    exponent) saves self, the exponent and the result, whichever gradients are asked for."""
    p = op.inputs[1].producer
    return (frozenset({0}), False) if p is not None and get(p.name).constant else (frozenset({0, 1}), True)


binary("pow", _power_any, _pow_vjp, **_F32, cost=_LIBM, saves=_pow_saves)
binary("floor_divide", _integer_division("floor_divide", np.floor_divide), nondiff=_PIECEWISE,
       cost=_IEEE, scalar_opmath=True)  # Python's // (floor), as torch.floor_divide
def _remainder(x, y):
    """torch's remainder: fmod, plus y where that is nonzero and of the other sign (a zero keeps fmod's
    sign, the dividend's: 4.0 % -2.0 is +0.0 where Python's % gives -0.0)."""
    if np.result_type(x, y).kind != "f":
        return np.remainder(x, y)
    mod = np.fmod(x, y)
    return np.where((mod != 0) & ((y < 0) != (mod < 0)), mod + y, mod).astype(mod.dtype)


binary("remainder", _integer_division("remainder", _remainder),  # Python's %: the divisor's sign, as torch's
       lambda b, g, x, y, out: (g, b.neg(b.mul(g, b.floor_divide(x, y)))), cost=_IEEE)
binary("fmod", _integer_division("fmod", np.fmod),  # C's fmod: the dividend's sign, as torch.fmod
       lambda b, g, x, y, out: (g, b.neg(b.mul(g, _trunc(b, b.div(x, y))))), cost=_IEEE)


def _atan2_vjp(b, g, x, y, out):
    """PyTorch's: with r = 1 / (x^2 + y^2), 0 where that is infinite (the origin, and where the squares
    underflow), (g * y * r, g * -x * r) for atan2(x, y)."""
    r = b.reciprocal(b.add(b.mul(x, x), b.mul(y, y)))
    r = b.where(b.eq(r, math.inf), 0.0, r)
    return b.mul(b.mul(g, y), r), b.mul(b.mul(g, b.neg(x)), r)


binary("hypot", np.hypot, lambda b, g, x, y, out: (b.div(b.mul(g, x), out), b.div(b.mul(g, y), out)),
       kinds=("float",), cost=_LIBM,
       doc="sqrt(x^2 + y^2) without overflow or underflow; the gradient torch's grad * self / result")
binary("atan2", np.arctan2, _atan2_vjp, kinds=("float",), cost=_LIBM)  # atan2(x, y): the angle of (y, x)
STRAIGHT_THROUGH = binary(
    "straight_through", lambda x, y: np.array(np.broadcast_to(y, np.broadcast_shapes(x.shape, y.shape))),
    lambda b, g, x, y, out: (g, None), kinds=("float",), autocast="widest",
    doc="y's values with x's gradient: the result is y, and its gradient flows to x whole (none to y). What "
        "a write no gradient is recorded for (under no_grad, or through detach()) leaves in a tensor that has "
        "a gradient history, as torch keeps that history; removed after autodiff")
binary("maximum", np.maximum, _minmax_vjp(lambda b, p, q: b.gt(p, q)), on_bool="logical_or")
binary("minimum", np.minimum, _minmax_vjp(lambda b, p, q: b.lt(p, q)), on_bool="logical_and")

_CMP = "comparison: boolean result has no gradient"
for _name, _fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal)):
    binary(_name, _fn, kinds=("float", "int", "bool"), out_dtype=boolean, nondiff=_CMP,
           commutative=_name in ("eq", "ne"))  # a == b is b == a bit for bit; a < b is not b < a
LOGICAL_AND = binary("logical_and", np.logical_and, kinds=("bool",), nondiff=_CMP, commutative=True)
binary("logical_or", np.logical_or, kinds=("bool",), nondiff=_CMP, commutative=True)
unary("logical_not", np.logical_not, kinds=("bool",), nondiff=_CMP)


BITWISE = ("and", "or", "xor", "lshift", "rshift")


def _bitwise_infer(types, fn):
    a, b = types
    if a.dtype != b.dtype:
        raise DTypeError(f"bitwise_{fn} {a}, {b}: dtypes differ ({a.dtype} vs {b.dtype}); cast one first")
    check_dtype(f"bitwise_{fn}", a, ("int",) if fn in ("lshift", "rshift") else ("int", "bool"))
    return TensorType(broadcast_shapes(f"bitwise_{fn}", types), a.dtype)


def _bitwise_ref(x, y, fn):
    if fn in ("and", "or", "xor"):
        return getattr(np, f"bitwise_{fn}")(x, y)
    bits = x.dtype.itemsize * 8  # PyTorch's: a shift by a negative count or by the width or more gives 0
    out_of_range = (y.astype(np.int64) < 0) | (y.astype(np.int64) >= bits)  # (<<) or the sign (>>: -1 or 0)
    if fn == "lshift":
        return np.where(out_of_range, 0, np.left_shift(x, np.where(out_of_range, 0, y).astype(x.dtype)))\
            .astype(x.dtype)
    fill = np.where(x < 0, -1, 0).astype(x.dtype)  # the sign (0 for unsigned x)
    return np.where(out_of_range, fill, np.right_shift(x, np.where(out_of_range, 0, y).astype(x.dtype)))\
        .astype(x.dtype)


BITWISE_OP = register(OpDef("bitwise", "elementwise", 2, _bitwise_infer, _bitwise_ref,
                            {"fn": Attr("str", REQUIRED, BITWISE)}, nondiff="integer result: no gradient",
                            doc="bitwise and / or / xor of integers and bools, << and >> of integers "
                                "(torch.bitwise_*), with PyTorch's results for shift counts out of range"))


def _where_infer(types):
    c, a, b = types
    if c.dtype != boolean:
        raise DTypeError(f"where: condition {c} must be bool")
    if a.dtype != b.dtype:
        raise DTypeError(f"where {a}, {b}: branch dtypes differ ({a.dtype} vs {b.dtype})")
    return TensorType(broadcast_shapes("where", types), a.dtype)


WHERE = register(OpDef("where", "elementwise", 3, _where_infer, lambda c, a, b: np.where(c, a, b),
               vjp=lambda b, g, c, x, y, out: (None, b.where(c, g, 0), b.where(c, 0, g))))


def _cast_vjp(b, g, x, out, dtype):
    return (b.cast(g, dtype=x.dtype) if x.dtype.is_float else None,)


CAST = register(OpDef("cast", "elementwise", 1, lambda types, dtype: types[0].with_dtype(dtype),
               lambda x, dtype: x.astype(dtype.np_dtype), {"dtype": Attr("dtype")}, _cast_vjp, conversion=True,
               sign_only=True))
