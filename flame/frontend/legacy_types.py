"""Tensor.type: torch's tensor-type names ("torch.FloatTensor", "torch.cuda.LongTensor") for flame's dtypes.

`x.type()` names x's type as torch does, with flame's prefix ("flame.FloatTensor"; "flame.cuda.FloatTensor"
for a tensor on the GPU executor); `x.type(name)` takes that name with either prefix (code written for
torch passes "torch.DoubleTensor") or a dtype, and gives x converted, or x itself when it already is of
that type. Any other string, or a Python type, is torch's ValueError "invalid type"; another object its
TypeError."""

from __future__ import annotations

from flame.ir.dtypes import DType, bf16, boolean, f8e4m3, f8e5m2, f16, f32, f64, i8, i16, i32, i64, u8

_NAMES = {f32: "FloatTensor", f64: "DoubleTensor", f16: "HalfTensor", bf16: "BFloat16Tensor",
          i64: "LongTensor", i32: "IntTensor", i16: "ShortTensor", i8: "CharTensor", u8: "ByteTensor",
          boolean: "BoolTensor", f8e4m3: "Float8_e4m3fnTensor", f8e5m2: "Float8_e5m2Tensor"}
_BY_NAME = {name: dt for dt, name in _NAMES.items()}


def type_name(x) -> str:
    """torch's x.type() with flame's prefix: "flame.FloatTensor", "flame.cuda.LongTensor"."""
    where = "cuda." if x.device.type == "cuda" else ""
    return f"flame.{where}{_NAMES[x.dtype]}"


def _parse(spec: str) -> tuple[DType, str]:
    """(dtype, device type) of a name "flame.FloatTensor" / "torch.cuda.FloatTensor"; ValueError otherwise."""
    module, _, name = spec.rpartition(".")
    device = {"torch": "cpu", "flame": "cpu", "torch.cuda": "cuda", "flame.cuda": "cuda"}.get(module)
    if device is None or name not in _BY_NAME:
        raise ValueError(f"invalid type: {spec!r} (Tensor.type takes a dtype or a tensor type's name, "
                         f"e.g. 'flame.FloatTensor', 'torch.cuda.LongTensor')")
    return _BY_NAME[name], device


def converted(x, spec, non_blocking: bool = False):
    """torch's x.type(spec): x as the dtype (and, for a "cuda." name, the device) spec names."""
    if isinstance(spec, DType):
        return x.to(spec, non_blocking=non_blocking)
    if isinstance(spec, type):  # torch reads a class as a tensor type's name: `float` is none
        raise ValueError(f"invalid type: {f'{spec.__module__}.{spec.__qualname__}'.removeprefix('builtins.')!r}"
                         f" (Tensor.type takes a dtype or a tensor type's name, e.g. 'flame.FloatTensor')")
    if not isinstance(spec, str):
        raise TypeError(f"dtype must be a type, str, or dtype object, got {type(spec).__name__}")
    dtype, device = _parse(spec)
    if device == "cuda":
        return x.to("cuda", dtype, non_blocking=non_blocking)
    return x.to("cpu", dtype, non_blocking=non_blocking)
