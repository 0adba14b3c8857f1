"""torch's top-level in-place spellings (torch.exp_(x), torch.clamp_(x, 0), torch.zero_(x) ...): each
is x.name_(...), made by one rule from the Tensor method of the same name, with its parameters."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from flame.frontend import methods  # noqa: F401  (Tensor's methods are bound: the rule reads them)
from flame.frontend.tensor import Tensor

NAMES = (
    "abs_", "acos_", "acosh_", "addmv_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_", "arctanh_", "asin_",
    "asinh_", "atan_", "atanh_", "ceil_", "clamp_", "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_",
    "detach_", "erf_", "erfc_", "exp2_", "exp_", "expm1_", "fill_", "fix_", "floor_", "frac_", "gcd_", "i0_",
    "index_put_", "lcm_", "ldexp_", "log10_", "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_", "negative_",
    "rad2deg_", "reciprocal_", "round_", "rsqrt_", "sigmoid_", "sin_", "sinc_", "sinh_", "sqrt_", "square_", "tan_",
    "tanh_", "trunc_", "xlogy_", "zero_",
)


def _function(name: str) -> Callable:
    def fn(input: Tensor, *args, **kwargs) -> Tensor:  # noqa: A002
        return getattr(input, name)(*args, **kwargs)

    params = list(inspect.signature(getattr(Tensor, name)).parameters.values())
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"input.{name}(...): written into input, which is returned (torch.{name})."
    fn.__signature__ = inspect.Signature([params[0].replace(name="input"), *params[1:]])
    return fn


globals().update({name: _function(name) for name in NAMES})
__all__ = [*NAMES]  # noqa: PLE0605  (made above)
