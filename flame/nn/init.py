"""Parameter initialisation (torch.nn.init names), drawn with flame.rand / flame.randn so a seeded
flame.Generator (or flame.manual_seed) makes a model's initial weights reproducible."""

from __future__ import annotations

import math
import warnings

from flame.errors import ArgumentRangeError, DTypeError
from flame.frontend.context import no_grad, user_location
from flame.frontend.creation import Generator, normal_, rand, randn, uniform_
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64

__all__ = ["calculate_gain", "constant_", "dirac_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
           "orthogonal_", "sparse_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_"]


def _fans(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight: its dims 1 and 0, each times the product of the dims after them."""
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    """fan_in or fan_out (torch's modes, any case); another mode raises torch's ValueError."""
    mode = mode.lower() if isinstance(mode, str) else mode
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _fans(tensor)
    return fan_in if mode == "fan_in" else fan_out


# torch.nn.init's private helpers, which custom layers' reset_parameters call by these names
_calculate_fan_in_and_fan_out = _fans
_calculate_correct_fan = _fan


def _empty(tensor: Tensor) -> bool:
    """True (with torch's warning) for a tensor with no elements, which the Kaiming fills leave as it is."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain of torch.nn.init.calculate_gain: 1 for the linear and convolution layers and
    sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (slope `param`, 0.01
    when None; a bool or another type raises, as torch's) and 3/4 for selu."""
    if nonlinearity in _LINEAR:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill tensor in place with val."""
    with no_grad():
        return tensor.copy_(val)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill tensor in place with zeros."""
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill tensor in place with ones."""
    return constant_(tensor, 1.0)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Generator | None = None) -> Tensor:
    """U(-bound, bound) with bound = gain * sqrt(3 / fan). With a=sqrt(5) (nn.Linear's default) the
    bound is 1/sqrt(fan_in). A tensor with no elements is left as it is (with torch's warning)."""
    if _empty(tensor):
        return tensor
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(tensor, mode))
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan). A tensor with no elements is left as it is (with torch's
    warning)."""
    if _empty(tensor):
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)), generator)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Generator | None = None) -> Tensor:
    """Fill tensor in place with N(mean, std^2) truncated to [a, b] (bounds in the tensor's units, as
    torch.nn.init.trunc_normal_): one f64 uniform draw per element mapped through the normal's inverse
    CDF between the bounds' CDF values. The CDFs are taken in log space and bounds in the upper tail are
    mirrored into the lower one, so bounds many standard deviations from the mean (where 1 - CDF rounds
    to 0) still give the truncated distribution. As torch's: a mean more than 2 std outside [a, b]
    warns, a > b raises its RuntimeError, a == b fills with a."""
    import numpy as np
    from scipy.special import log_ndtr, ndtri_exp

    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)
    if a > b:
        raise ArgumentRangeError(f"uniform_ expects to return a [from, to) range, but found from={a:g} > to={b:g}")
    if not tensor.dtype.is_float:  # torch's normal kernel has no integer, bool or float8 case
        raise DTypeError(f"trunc_normal_: dtype must be a float dtype, got {tensor.dtype}\n  at {user_location()}")
    lo, hi = (a - mean) / std, (b - mean) / std  # standardised bounds
    flip = lo > 0  # both in the upper tail: draw from [-hi, -lo], where the CDF keeps its precision
    if flip:
        lo, hi = -hi, -lo
    u = np.maximum(rand(*tensor.shape, dtype=f64, generator=generator).numpy(), 2.0**-64)
    log_p = np.logaddexp(log_ndtr(lo) + np.log1p(-u), log_ndtr(hi) + np.log(u))  # log((1 - u) cdf(lo) + u cdf(hi))
    z = ndtri_exp(log_p)
    values = (-z if flip else z) * std + mean
    np_dtype = tensor.dtype.np_dtype
    values = np.clip(values.astype(np_dtype), np_dtype.type(a), np_dtype.type(b))
    with no_grad():
        return tensor.copy_(Tensor(values))


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill tensor (2-D or more: its trailing dims flattened) with a (semi-)orthogonal matrix times gain:
    the Q of a QR decomposition of a normal draw, its signs fixed by R's diagonal, as
    torch.nn.init.orthogonal_."""
    import numpy as np

    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows, cols = tensor.shape[0], math.prod(tensor.shape[1:])
    flat = randn(rows, cols, dtype=tensor.dtype, generator=generator).numpy().astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with no_grad():
        return tensor.copy_(Tensor((q * gain).reshape(tensor.shape).astype(tensor.dtype.np_dtype)))


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (ones on the diagonal, as many as fit)."""
    import numpy as np

    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with no_grad():
        return tensor.copy_(Tensor(np.eye(*tensor.shape, dtype=tensor.dtype.np_dtype)))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D convolution weight [out, in, *k] with the Dirac delta (the identity
    convolution: each output channel passes its input channel through, per group)."""
    import numpy as np

    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if tensor.shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    out = np.zeros(tensor.shape, dtype=tensor.dtype.np_dtype)
    per = tensor.shape[0] // groups
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(per, tensor.shape[1])):
            out[(g * per + d, d, *centre)] = 1
    with no_grad():
        return tensor.copy_(Tensor(out))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: Generator | None = None) -> Tensor:
    """Fill a 2-D tensor with N(0, std^2) draws, then zero ceil(sparsity * rows) randomly chosen elements of
    every column (torch.nn.init.sparse_)."""
    import numpy as np

    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = math.ceil(sparsity * rows)
    values = randn(rows, cols, dtype=tensor.dtype, generator=generator).numpy() * std
    order = rand(rows, cols, generator=generator).numpy().argsort(0, kind="stable")  # a permutation per column
    np.put_along_axis(values, order[:zeros], 0, axis=0)
    with no_grad():
        return tensor.copy_(Tensor(values.astype(tensor.dtype.np_dtype)))
