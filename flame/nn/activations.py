"""The modules of the activations, similarities and losses in flame.frontend.activations (PyTorch's
names and constructor arguments; `inplace=True` is accepted and means nothing: flame's IR is pure)."""

from __future__ import annotations

from flame.frontend import activations as A
from flame.frontend.creation import full
from flame.frontend.tensor import Tensor
from flame.nn.layers import _Elementwise
from flame.nn.module import Module
from flame.nn.parameter import Parameter

__all__ = ["CELU", "ELU", "GLU", "SELU", "CosineSimilarity", "Hardsigmoid", "Hardswish", "Hardtanh", "HuberLoss",
           "KLDivLoss", "LogSigmoid", "Mish", "PReLU", "PairwiseDistance", "ReLU6", "Softmin", "Softplus",
           "Softsign", "Threshold", "Unflatten"]


class Softplus(_Elementwise):
    fn = staticmethod(A.softplus)

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__(beta=beta, threshold=threshold)


class ELU(_Elementwise):
    fn = staticmethod(A.elu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(alpha=alpha)


class CELU(_Elementwise):
    fn = staticmethod(A.celu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(alpha=alpha)


class SELU(_Elementwise):
    fn = staticmethod(A.selu)

    def __init__(self, inplace: bool = False):
        super().__init__()


class Mish(_Elementwise):
    fn = staticmethod(A.mish)

    def __init__(self, inplace: bool = False):
        super().__init__()


class Hardtanh(_Elementwise):
    fn = staticmethod(A.hardtanh)

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__(min_val=min_val, max_val=max_val)


class ReLU6(_Elementwise):
    fn = staticmethod(A.relu6)

    def __init__(self, inplace: bool = False):
        super().__init__()


class Hardsigmoid(_Elementwise):
    fn = staticmethod(A.hardsigmoid)

    def __init__(self, inplace: bool = False):
        super().__init__()


class Hardswish(_Elementwise):
    fn = staticmethod(A.hardswish)

    def __init__(self, inplace: bool = False):
        super().__init__()


class LogSigmoid(_Elementwise):
    fn = staticmethod(A.logsigmoid)


class Softsign(_Elementwise):
    fn = staticmethod(A.softsign)


class GLU(_Elementwise):
    fn = staticmethod(A.glu)

    def __init__(self, dim: int = -1):
        super().__init__(dim=dim)


class Softmin(_Elementwise):
    fn = staticmethod(A.softmin)

    def __init__(self, dim: int = -1):
        super().__init__(dim=dim)


class Threshold(_Elementwise):
    fn = staticmethod(A.threshold)

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__(threshold=threshold, value=value)


class PReLU(Module):
    """x where x >= 0, else a learned slope times x: one slope, or num_parameters (one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(full((num_parameters,), init, dtype))

    def forward(self, x: Tensor) -> Tensor:
        return A.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return A.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return A.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class HuberLoss(Module):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__()
        self.reduction, self.delta = reduction, delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return A.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(Module):
    def __init__(self, reduction: str = "mean", log_target: bool = False):
        super().__init__()
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return A.kl_div(input, target, self.reduction, self.log_target)


class Unflatten(Module):
    """Dimension dim split into sizes (one of them may be -1), as torch.nn.Unflatten."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dim % x.ndim
        return x.reshape(*x.shape[:d], *self.unflattened_size, *x.shape[d + 1:])
