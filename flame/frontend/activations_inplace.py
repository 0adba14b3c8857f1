"""torch's `inplace` argument of the activations and dropouts, and their in-place spellings (`F.relu_`,
`F.elu_`, ...): with inplace=True the result is written into the input, which is returned, so a later
read of the input (a view of it, an activation a forward hook kept) sees it, as in PyTorch; torch's
rules through Tensor._inplace (a leaf that requires grad is refused). flame.nn.functional's public
names for these functions; the computations are flame.frontend.functional's and .activations'."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flame.frontend import activations as A
from flame.frontend import functional as F
from flame.frontend.creation import Generator
from flame.frontend.tensor import Tensor

__all__ = ["alpha_dropout", "celu", "celu_", "dropout", "dropout1d", "dropout2d", "dropout3d", "elu", "elu_",
           "feature_alpha_dropout", "hardsigmoid", "hardswish", "hardtanh", "hardtanh_", "leaky_relu",
           "leaky_relu_", "mish", "relu", "relu6", "relu_", "rrelu", "rrelu_", "selu", "selu_", "silu", "threshold",
           "threshold_"]


def into(input: Tensor, inplace: bool, fn: Callable[[Tensor], Tensor], name: str) -> Tensor:  # noqa: A002
    """fn(input); with inplace, written into input, which is returned."""
    return input._inplace(fn, what=f"{name}(inplace=True)") if inplace else fn(input)


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, F.relu, "relu")


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, A.relu6, "relu6")


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, lambda x: A.hardtanh(x, min_val, max_val), "hardtanh")


# torch's in-place forms of elu, selu, celu and leaky_relu (and rrelu's when not training) save their result,
# not their input: their gradient is computed from it (a write into the result after raises at backward)

def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    if inplace:
        A.floating_only("elu", input)
        return into(input, True, lambda x: A.elu_from_result(x, alpha), "elu")
    return A.elu(input, alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    if inplace:
        A.floating_only("selu", input)
        return into(input, True, lambda x: A.elu_from_result(x, A.SELU_ALPHA, A.SELU_SCALE), "selu")
    return A.selu(input)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    if inplace:  # (celu_'s backward takes 1 / alpha in float: activations.celu)
        A.floating_only("celu", input)
        scales = (1.0 / alpha, 1.0 / float(np.float32(alpha)))
        return into(input, True, lambda x: A.elu_from_result(x, alpha, 1.0, *scales), "celu")
    return A.celu(input, alpha)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    if inplace:
        A.floating_only("leaky_relu", input)
        return into(input, True, lambda x: A.leaky_relu_from_result(x, negative_slope), "leaky_relu")
    return F.leaky_relu(input, negative_slope)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, lambda x: A.threshold(x, threshold, value), "threshold")


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          inplace: bool = False, *, generator: Generator | None = None) -> Tensor:
    if inplace and not training:  # leaky_relu_ with the mean slope, as torch's
        A.rrelu(input, lower, upper, training)  # (its checks)
        return leaky_relu(input, (lower + upper) / 2, True)
    return into(input, inplace, lambda x: A.rrelu(x, lower, upper, training, generator=generator), "rrelu")


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, A.hardsigmoid, "hardsigmoid")


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, A.hardswish, "hardswish")


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, F.silu, "silu")


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return into(input, inplace, A.mish, "mish")


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
            *, generator: Generator | None = None) -> Tensor:
    return into(input, inplace and training, lambda x: F.dropout(x, p, training, generator=generator), "dropout")


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False,  # noqa: A002
                  *, generator: Generator | None = None) -> Tensor:
    return into(input, inplace and training,
                lambda x: F.alpha_dropout(x, p, training, generator=generator), "alpha_dropout")


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False,  # noqa: A002
                          *, generator: Generator | None = None) -> Tensor:
    return into(input, inplace and training,
                lambda x: F.feature_alpha_dropout(x, p, training, generator=generator), "feature_alpha_dropout")


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
              *, generator: Generator | None = None) -> Tensor:
    return into(input, inplace and training, lambda x: F.dropout1d(x, p, training, generator=generator), "dropout1d")


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
              *, generator: Generator | None = None) -> Tensor:
    return into(input, inplace and training, lambda x: F.dropout2d(x, p, training, generator=generator), "dropout2d")


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
              *, generator: Generator | None = None) -> Tensor:
    return into(input, inplace and training, lambda x: F.dropout3d(x, p, training, generator=generator), "dropout3d")


def relu_(input: Tensor) -> Tensor:  # noqa: A002
    return relu(input, True)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    return elu(input, alpha, True)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    return celu(input, alpha, True)


def selu_(input: Tensor) -> Tensor:  # noqa: A002
    return selu(input, True)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    return leaky_relu(input, negative_slope, True)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    return hardtanh(input, min_val, max_val, True)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:  # noqa: A002
    return globals()["threshold"](input, threshold, value, True)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
           *, generator: Generator | None = None) -> Tensor:
    return rrelu(input, lower, upper, training, True, generator=generator)
