"""PyTorch's prod_backward as the gradient of a product (Tensor.prod): a product is computed as the last
running product of cumprod, whose own gradient differs from torch's where an infinity or NaN meets a zero
or an intermediate product overflows. So the value keeps cumprod's rounding and its gradient is torch's
formula, given through straight_through."""

from __future__ import annotations

from flame.frontend import opmath
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat, full, where


def with_prod_backward(x: Tensor, axis: int, keepdim: bool, value: Tensor, *, whole: bool = False) -> Tensor:
    """value, the product of a floating x along axis (of every element when `whole`: x flat, axis 0), with
    PyTorch's prod_backward as its gradient, in x's dtype: grad * (result / x) where no element of x is
    zero, else grad times the product of the others (exclusive cumprods from both ends); of every element,
    0 where x holds two zeros or more. Other dtypes, or no gradient wanted: value as it is."""
    if not opmath.float_gradient(x):
        return value
    t, n = x.detach(), x.shape[axis]
    res = value.detach() if keepdim else value.detach().unsqueeze(axis)
    one = full(tuple(1 if a == axis else m for a, m in enumerate(x.shape)), 1, x.dtype)
    before = cat([one, t.narrow(axis, 0, n - 1)], axis).cumprod(axis)
    after = cat([one, t.narrow(axis, 1, n - 1).flip(axis)], axis).cumprod(axis).flip(axis)
    zeros = (t == 0).sum()
    others = where(zeros > 1, 0.0, before * after) if whole else before * after
    coef = where(zeros > 0, others, res / t)
    return apply("straight_through", (x * coef).sum(axis, keepdim=keepdim), value)
