"""torch.cov: the covariance of a matrix's rows over its columns, each observation weighted by frequency
and analytic weights, with torch's checks of the weights and its warning where the degrees of freedom are
not positive."""

from __future__ import annotations

import warnings

from flame.errors import ArgumentRangeError, DTypeError, ShapeError
from flame.frontend.context import user_location, user_stacklevel
from flame.frontend.default_dtype import as_floating
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import where
from flame.ir.dtypes import boolean


def cov(input: Tensor, *, correction: int = 1, fweights: Tensor | None = None,  # noqa: A002
        aweights: Tensor | None = None) -> Tensor:
    """The covariance of input's rows (variables) over its columns (observations), as torch.cov: each
    observation weighted by fweights (integer repeat counts) times aweights (floating importance
    weights); the normaliser is sum(w) - correction, or sum(w) - correction * sum(w * aweights) / sum(w)
    with aweights (degrees of freedom <= 0: it is 0, as torch's, with torch's warning where it is known).
    A single variable gives a 0-d result."""
    if input.ndim > 2:
        raise ShapeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                         f"{input.ndim} dimensions\n  at {user_location()}")
    if input.dtype == boolean:
        raise DTypeError(f"cov(): bool dtype is not supported for input, as in PyTorch\n  at {user_location()}")
    x = as_floating(input.reshape(1, -1) if input.ndim < 2 else input)
    n = x.shape[1]
    w = None
    for name, weights, integral in (("fweights", fweights, True), ("aweights", aweights, False)):
        if weights is not None:
            weights = _cov_weights(name, weights, n, integral)
            w = weights if w is None else w * weights
    if w is None:
        w_sum, norm = n, n - correction
        if norm <= 0:
            _dof_warning()
            norm = 0
    else:
        w_sum = w.sum()
        if w_sum._value is None and float(w_sum) == 0:  # (known only eagerly, as the signs of the weights)
            raise ArgumentRangeError(f"cov(): weights sum to zero, can't be normalized\n  at {user_location()}")
        norm = w_sum - (correction if aweights is None or correction == 0
                        else correction * (w * aweights.reshape(-1)).sum() / w_sum)
        if norm._value is None and float(norm) <= 0:
            _dof_warning()
        norm = where(norm <= 0, 0, norm)
    weighted = x if w is None else x * w
    centered = x - (weighted.sum(1, keepdim=True) / w_sum)
    out = centered @ (centered if w is None else centered * w).transpose(0, 1)
    return (out / norm).squeeze()


def _cov_weights(name: str, weights, n: int, integral: bool) -> Tensor:
    """cov's fweights or aweights as a 1-D tensor of n entries, checked as torch checks them."""
    if not isinstance(weights, Tensor):
        raise DTypeError(f"cov(): {name} must be a tensor, got {type(weights).__name__}\n  at {user_location()}")
    if weights.ndim > 1:
        raise ShapeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
                         f"{weights.ndim} dimensions\n  at {user_location()}")
    if weights.dtype.is_float == integral or weights.dtype.kind == "bool":
        want = "integral" if integral else "floating point"
        raise DTypeError(f"cov(): expected {name} to have {want} dtype but got {name} with {weights.dtype} dtype"
                         f"\n  at {user_location()}")
    if weights.numel() != n:
        raise ShapeError(f"cov(): expected {name} to have the same numel as there are observations in the input "
                         f"but got {weights.numel()} != {n}\n  at {user_location()}")
    negative = (weights < 0).any()  # (known only eagerly: inside @flame.compile a traced value)
    if negative._value is None and bool(negative):
        raise ArgumentRangeError(f"cov(): {name} cannot be negative\n  at {user_location()}")
    return weights.reshape(-1)


def _dof_warning() -> None:
    warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of "
                  "observations.", UserWarning, stacklevel=user_stacklevel())
