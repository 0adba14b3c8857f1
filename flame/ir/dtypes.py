"""The dtypes flame knows. One table: name, NumPy dtype, CUDA storage type, CUDA compute type.

The two FP8 formats (`f8e4m3`: PyTorch's float8_e4m3fn, 4 exponent and 3 mantissa bits, finite only,
largest 448; `f8e5m2`: 5 and 2, with infinities, largest 57344) are of kind "float8": storage types for
FP8 training (flame.amp.Float8Recipe). Only the ops that declare it take them (cast, scaled_cast,
fp8_matmul), and no promotion involves them, as in PyTorch. Kernels compute on them in f32."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from flame.errors import DTypeError


@dataclass(frozen=True)
class DType:
    name: str  # printed name: f32, bf16, i64, bool ...
    np_dtype: np.dtype
    cuda_type: str  # storage type in generated CUDA
    cuda_compute: str  # arithmetic type in generated CUDA (f16/bf16 compute in f32)
    kind: str  # "float", "float8", "int" or "bool"

    @property
    def itemsize(self) -> int:
        return self.np_dtype.itemsize

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_float8(self) -> bool:
        return self.kind == "float8"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    # torch.dtype's names of the same facts (code written for torch tests `v.dtype.is_floating_point`)
    @property
    def is_floating_point(self) -> bool:
        return self.kind in ("float", "float8")

    @property
    def is_signed(self) -> bool:
        return self.kind != "bool" and self.np_dtype.kind != "u"

    @property
    def is_complex(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        # the dataclass's field-by-field test, decided by identity or the name first: tracing compares
        # dtypes several times per op, and comparing NumPy dtypes is slow
        if self is other:
            return True
        if other.__class__ is not DType:
            return NotImplemented
        return self.name == other.name and (self.np_dtype, self.cuda_type, self.cuda_compute, self.kind) == (
            other.np_dtype, other.cuda_type, other.cuda_compute, other.kind)

    def __hash__(self) -> int:  # the name alone (dtypes that are equal have one name): NumPy's dtype hashes slowly
        return hash(self.name)

    def __repr__(self) -> str:
        return f"flame.{self.name}"

    def __str__(self) -> str:
        return self.name


f32 = DType("f32", np.dtype(np.float32), "float", "float", "float")
f64 = DType("f64", np.dtype(np.float64), "double", "double", "float")
f16 = DType("f16", np.dtype(np.float16), "__half", "float", "float")
bf16 = DType("bf16", np.dtype(ml_dtypes.bfloat16), "__nv_bfloat16", "float", "float")
i32 = DType("i32", np.dtype(np.int32), "int", "int", "int")
i64 = DType("i64", np.dtype(np.int64), "long long", "long long", "int")
i16 = DType("i16", np.dtype(np.int16), "short", "short", "int")
i8 = DType("i8", np.dtype(np.int8), "signed char", "signed char", "int")
u8 = DType("u8", np.dtype(np.uint8), "unsigned char", "unsigned char", "int")  # flame's one unsigned dtype
boolean = DType("bool", np.dtype(np.bool_), "bool", "bool", "bool")
f8e4m3 = DType("f8e4m3", np.dtype(ml_dtypes.float8_e4m3fn), "__nv_fp8_storage_t", "float", "float8")
f8e5m2 = DType("f8e5m2", np.dtype(ml_dtypes.float8_e5m2), "__nv_fp8_storage_t", "float", "float8")
FP8_DTYPES: tuple[DType, ...] = (f8e4m3, f8e5m2)

ALL_DTYPES: tuple[DType, ...] = (f32, f16, bf16, f64, i32, i64, i16, i8, u8, boolean)
FLOAT_DTYPES: tuple[DType, ...] = (f32, f16, bf16, f64)
_BY_NAME = {d.name: d for d in ALL_DTYPES + FP8_DTYPES}
_ALIASES = {"float32": f32, "float": f32, "float64": f64, "double": f64, "float16": f16,
            "half": f16, "bfloat16": bf16, "int32": i32, "int": i32, "int64": i64, "long": i64, "int16": i16,
            "short": i16, "int8": i8, "uint8": u8, "bool_": boolean, "float8_e4m3fn": f8e4m3, "float8_e5m2": f8e5m2}
_BY_NP = {d.np_dtype: d for d in ALL_DTYPES + FP8_DTYPES}


_ML_NP = frozenset(d.np_dtype for d in (bf16, *FP8_DTYPES))


def is_ml_dtype(np_dtype) -> bool:
    """Whether a NumPy dtype is one of ml_dtypes' (bfloat16, the float8s), which NumPy and CuPy cannot
    compute in or hold on the device as such. Their `kind` is no test: ml_dtypes gives float8_e4m3fn
    kind 'V' and float8_e5m2 kind 'f'."""
    return np.dtype(np_dtype) in _ML_NP


def finfo(d: DType):
    """NumPy's finfo of float dtype d, bfloat16 and the float8s included (ml_dtypes.finfo: NumPy's own
    refuses ml_dtypes' types in some NumPy versions)."""
    return ml_dtypes.finfo(d.np_dtype) if is_ml_dtype(d.np_dtype) else np.finfo(d.np_dtype)


def value_range(d: DType) -> tuple[float, float]:
    """(lowest, largest) finite value of dtype d (bool: 0 and 1)."""
    if d.is_float:
        info = finfo(d)
        return float(info.min), float(info.max)
    if d.name == "bool":
        return 0.0, 1.0
    info = np.iinfo(d.np_dtype)
    return int(info.min), int(info.max)


def fp8_max(d: DType) -> float:
    """The largest finite value of FP8 dtype d (448 for f8e4m3, 57344 for f8e5m2)."""
    return float(ml_dtypes.finfo(d.np_dtype).max)


def dtype_of(x: object) -> DType:
    """The flame DType for a name ('f32', 'float32'), a NumPy dtype, a DType, or anything with .dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        found = _BY_NAME.get(x) or _ALIASES.get(x)
        if found is None:
            raise DTypeError(f"unknown dtype {x!r}; flame knows {', '.join(_BY_NAME)}")
        return found
    if x is float:
        return f32
    if x is int:
        return i64
    if x is bool:
        return boolean
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NP:
        return _BY_NP[npd]
    if npd is not None:
        raise DTypeError(f"dtype {npd} is not supported by flame; use one of {', '.join(_BY_NAME)}")
    raise DTypeError(f"cannot interpret {x!r} as a dtype")


_ORDER = {"bool": 0, "int": 1, "float": 2}


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op on tensors of dtypes a and b (PyTorch's rules for tensor-tensor)."""
    if a == b:
        return a
    if a.is_float8 or b.is_float8:
        raise DTypeError(f"no type promotion with float8 ({a} and {b}); as in PyTorch, convert explicitly")
    if _ORDER[a.kind] != _ORDER[b.kind]:
        return a if _ORDER[a.kind] > _ORDER[b.kind] else b
    if a.kind == "float":
        if {a, b} == {f16, bf16}:
            return f32
        return a if a.itemsize >= b.itemsize else b
    if u8 in (a, b) and (a.itemsize, b.itemsize) == (1, 1):
        return i16  # u8 with i8: the smallest signed dtype that holds both, as PyTorch
    return a if a.itemsize >= b.itemsize else b
