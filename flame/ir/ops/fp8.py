"""The FP8 family: what FP8 training (flame.amp.Float8Recipe) needs beyond `cast`, in one place.

- `scaled_cast(x, scale, dtype=f8e4m3|f8e5m2)`: x * scale saturated to the format's largest finite
  value (NaN stays NaN) and rounded once to FP8 (nearest even). scale is an f32 scalar tensor, a value
  of the step (computed from an amax, or read from a recipe's state), never a constant. An elementwise
  op: it fuses into the kernel that produces x (and beside an amax reduction of x).
- `fp8_matmul(a, b, a_inv, b_inv, out_dtype=bf16)`: (f32(a) @ f32(b)^T) * a_inv * b_inv accumulated in
  f32 and rounded once to out_dtype, for FP8 a [m, k] and b [n, k] (a Linear's weight layout; not both
  e5m2) and f32 scalar inverse scales: cuBLASLt's FP8 GEMM (A/B scale pointers) on the GPU, the exact
  emulation above on the reference executor. A library call ("matmul"). b is [n, k] because cuBLASLt
  runs FP8 GEMMs only in its "TN" form, which is flame's a [m, k] times b stored [n, k]
  (runtime/matmul.py): whoever needs another product writes the transposed operand (the FP8 linear's
  backward casts a transposed copy, one fused kernel).
- the amax of a tensor is `reduce_max(abs(x))` over every axis: the existing reduction, so it fuses with
  x's producer like any other; a scale is fp8_max / max(amax, SCALE_EPS) (frontend/fp8.py).

Neither op has a VJP: the FP8 linear (frontend/fp8.py) is an autograd function whose backward emits
the gradient GEMMs in FP8 itself (straight through the rounding)."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, ShapeError
from flame.ir.dtypes import FP8_DTYPES, bf16, f8e5m2, f16, f32, fp8_max
from flame.ir.registry import Attr, OpDef, register
from flame.ir.types import TensorType

SCALE_EPS = 1e-12  # the smallest amax a scale is computed from (torchao's EPS): an all-zero tensor gets a finite scale
OUT_DTYPES = (bf16, f16, f32)
_NONDIFF = (
    "an FP8 op is differentiated by the FP8 linear that emits it (flame.amp.Float8Recipe: its backward "
    "runs the gradient GEMMs in FP8, straight through the rounding)"
)


def _check_scale(op: str, t: TensorType, what: str) -> None:
    if t.dtype != f32 or t.shape != ():
        raise DTypeError(f"{op}: {what} must be an f32 scalar tensor, got {t}")


def _scaled_cast_infer(types, dtype):
    x, scale = types
    if dtype not in FP8_DTYPES:
        raise DTypeError(f"scaled_cast: dtype must be one of {', '.join(map(str, FP8_DTYPES))}, got {dtype}")
    if x.dtype not in (f32, bf16, f16):
        raise DTypeError(f"scaled_cast: input {x} must be f32, bf16 or f16")
    _check_scale("scaled_cast", scale, "scale")
    return x.with_dtype(dtype)


def _scaled_cast_ref(x, scale, dtype):
    limit = np.float32(fp8_max(dtype))
    y = np.asarray(x).astype(np.float32) * np.asarray(scale, np.float32)
    return np.clip(y, -limit, limit).astype(dtype.np_dtype)  # clip keeps NaN


SCALED_CAST = register(
    OpDef(
        "scaled_cast",
        "elementwise",
        2,
        _scaled_cast_infer,
        _scaled_cast_ref,
        {"dtype": Attr("dtype")},
        nondiff=_NONDIFF,
        autocast="keep",
    )
)


def _fp8_matmul_infer(types, out_dtype):
    a, b, a_inv, b_inv = types
    for t, what in ((a, "a"), (b, "b")):
        if t.dtype not in FP8_DTYPES:
            raise DTypeError(f"fp8_matmul: operand {what} {t} must be FP8 (f8e4m3 or f8e5m2)")
        if t.rank != 2:
            raise ShapeError(f"fp8_matmul: operand {what} {t} must be 2-D")
    if a.dtype == b.dtype == f8e5m2:
        raise DTypeError("fp8_matmul: at most one operand may be f8e5m2 (cuBLASLt has no e5m2 x e5m2 GEMM)")
    if a.shape[1] != b.shape[1]:
        raise ShapeError(f"fp8_matmul {a} @ {b}^T: inner dimensions differ ({a.shape[1]} vs {b.shape[1]})")
    _check_scale("fp8_matmul", a_inv, "a_inv")
    _check_scale("fp8_matmul", b_inv, "b_inv")
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"fp8_matmul: out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {out_dtype}")
    return TensorType((a.shape[0], b.shape[0]), out_dtype)


def _fp8_matmul_ref(a, b, a_inv, b_inv, out_dtype):
    """The FP8 GEMM's exact emulation: FP8 values are exact in f32; products summed in f32, then the
    two dequantisation scales, then one rounding to out_dtype."""
    a32 = np.ascontiguousarray(np.asarray(a).astype(np.float32))
    bt32 = np.ascontiguousarray(np.asarray(b).astype(np.float32).T)
    acc = np.matmul(a32, bt32)
    scale = np.float32(np.asarray(a_inv, np.float32) * np.asarray(b_inv, np.float32))
    return (acc * scale).astype(out_dtype.np_dtype)


FP8_MATMUL = register(
    OpDef(
        "fp8_matmul",
        "matmul",
        4,
        _fp8_matmul_infer,
        _fp8_matmul_ref,
        {"out_dtype": Attr("dtype")},
        nondiff=_NONDIFF,
        library="matmul",
        autocast="keep",
    )
)
