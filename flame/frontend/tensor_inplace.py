"""Tensor's in-place spellings of its elementwise and scan methods (`x.sigmoid_()`, `x.clamp_min_(0)`,
`x.cumsum_(0)`, `mask.logical_not_()`, `x.eq_(y)`), as torch's: self holds the out-of-place method's
result, converted to self's dtype (a comparison writes 1 / 0), and is returned; torch's rules through
Tensor._inplace (the result keeps self's shape, a float result is refused into an integer tensor, an
argument partly overlapping self is refused, a leaf that requires grad is refused). One rule, made
for every method in IN_PLACE that Tensor has and whose in-place form is not written out elsewhere."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from flame.frontend.tensor import Tensor

# torch.Tensor's in-place methods made from the out-of-place method of the same name
IN_PLACE = (
    "abs", "absolute", "acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh",
    "addbmm", "addmm", "addmv", "addr", "asin", "asinh", "atan", "atan2",
    "atanh", "baddbmm", "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or",
    "bitwise_right_shift", "bitwise_xor", "ceil", "clamp_max", "clamp_min", "copysign", "cos", "cosh",
    "cumprod", "cumsum", "deg2rad", "digamma", "divide", "eq", "erf", "erfc", "erfinv", "exp", "exp2", "expm1",
    "fix", "floor", "floor_divide", "fmod", "frac", "gcd", "ge", "greater", "greater_equal", "gt", "heaviside",
    "hypot", "i0", "igamma", "igammac", "index_reduce", "lcm", "ldexp", "le", "lerp", "less", "less_equal", "lgamma",
    "log", "log10", "log1p", "log2", "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "lt",
    "multiply", "mvlgamma", "nan_to_num", "ne", "neg", "negative", "nextafter", "not_equal", "polygamma", "pow", "put",
    "rad2deg", "reciprocal", "relu", "remainder", "renorm", "round", "rsqrt", "sgn", "sigmoid", "sign", "sin",
    "sinc", "sinh", "sqrt", "square", "subtract", "tan", "tanh", "tril", "triu", "true_divide", "trunc",
    "xlogy",
)


def _variant(cls: type, name: str) -> Callable:
    def method(self, *args, **kwargs):
        others = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        return self._inplace(lambda x: getattr(x, name)(*args, **kwargs), *others, what=f"{name}_")

    method.__name__ = method.__qualname__ = f"{name}_"
    method.__doc__ = f"self = self.{name}(...), in place (torch's Tensor.{name}_)."
    method.__signature__ = inspect.signature(getattr(cls, name))  # the out-of-place method's parameters
    return method


def in_place_methods(cls: type) -> type:
    """A mixin with `name_` for each name in IN_PLACE that cls has and whose `name_` it lacks."""
    made = {f"{n}_": _variant(cls, n) for n in IN_PLACE if hasattr(cls, n) and not hasattr(cls, f"{n}_")}
    return type("TensorInPlace", (), {"__slots__": (), **made})
