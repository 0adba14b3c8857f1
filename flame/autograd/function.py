"""flame.autograd.function, torch.autograd.function's names: `from torch.autograd.function import
once_differentiable` (or Function, FunctionCtx) reads the same with flame."""

from flame.frontend.custom_function import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "once_differentiable"]
