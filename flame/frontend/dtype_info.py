"""flame.finfo and flame.iinfo: the numeric limits of a dtype, as torch.finfo / torch.iinfo (the same
attribute names and values; `dtype` is torch's name of the dtype, 'float32', 'bfloat16', ...)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from flame.errors import ArgumentTypeError
from flame.frontend.default_dtype import get_default_dtype
from flame.ir.dtypes import DType, dtype_of

__all__ = ["finfo", "iinfo"]

_TORCH_NAMES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "f8e4m3": "float8_e4m3fn",
                "f8e5m2": "float8_e5m2", "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "u8": "uint8"}


def _dtype(type, what: str) -> DType:  # noqa: A002
    try:
        return dtype_of(type)
    except Exception:  # noqa: BLE001 - any unknown spelling is torch's TypeError
        raise ArgumentTypeError(f"torch.{what}(): argument 'type' must be a dtype, not {type!r}") from None


class _Info:
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, k) for k in self.__slots__))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k):g}" if isinstance(getattr(self, k), float)
                           else f"{k}={getattr(self, k)}" for k in self._shown)
        return f"{type(self).__name__}({fields})"


class finfo(_Info):  # noqa: N801  (torch's name)
    """Limits of a floating dtype (the default dtype when none is given): bits, eps, max, min, tiny
    (= smallest_normal), resolution and dtype, as torch.finfo."""

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")
    _shown = ("resolution", "min", "max", "eps", "smallest_normal", "tiny", "dtype")

    def __init__(self, type=None):  # noqa: A002
        d = get_default_dtype() if type is None else _dtype(type, "finfo")
        if not (d.is_float or d.is_float8):
            raise ArgumentTypeError("torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                                    "'torch.finfo'")
        info = ml_dtypes.finfo(d.np_dtype)
        self.bits, self.eps, self.max, self.min = int(info.bits), float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(-math.log10(self.eps))  # torch's: 10**-(decimal digits of eps)
        self.dtype = _TORCH_NAMES[d.name]


class iinfo(_Info):  # noqa: N801
    """Limits of an integer dtype (bits, max, min, dtype), as torch.iinfo."""

    __slots__ = ("bits", "max", "min", "dtype")
    _shown = ("min", "max", "dtype")

    def __init__(self, type):  # noqa: A002
        d = _dtype(type, "iinfo")
        if not d.is_int:
            raise ArgumentTypeError(f"{d} is not supported by torch.iinfo (it requires an integer input type; "
                                    f"torch.finfo takes floating ones)")
        info = np.iinfo(d.np_dtype)
        self.bits, self.max, self.min, self.dtype = 8 * d.itemsize, int(info.max), int(info.min), _TORCH_NAMES[d.name]
