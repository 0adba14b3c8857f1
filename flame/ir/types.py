"""TensorType: an immutable (shape, dtype) pair, printed as f32[128,256]."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flame.errors import ShapeError
from flame.ir.dtypes import DType
from flame.ir.symbolic import SymInt


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        shape = self.shape
        if type(shape) is tuple:  # (the common case, asked first: a tuple of non-negative ints is kept as it is)
            for s in shape:
                if type(s) is not int or s < 0:
                    break
            else:
                return
        # a SymInt (flame.ir.symbolic) stays one: it is its value, and codegen renders it as a size parameter
        object.__setattr__(self, "shape", tuple(s if isinstance(s, SymInt) else int(s) for s in self.shape))
        if any(s < 0 for s in self.shape):
            raise ShapeError(f"negative dimension in shape {self.shape} (torch: Trying to create tensor with "
                             f"negative dimension)")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        text = self.__dict__.get("_text")  # (the type is immutable: its text, once made, is its text)
        if text is None:
            text = f"{self.dtype.name}[{','.join([str(s) for s in self.shape])}]"
            if all(type(s) is int for s in self.shape):  # a SymInt prints as the rendering context says
                object.__setattr__(self, "_text", text)
        return text
