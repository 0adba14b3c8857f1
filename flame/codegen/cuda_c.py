"""CUDA C spelling of flame dtypes: storage/compute types, loads, exact conversions and literals.

Every kernel loads storage values into a *compute* type (f16/bf16 -> float), computes, and stores
through `convert`, which rounds ONCE from the compute value to the storage type (as NumPy does)."""

from __future__ import annotations

import math

import numpy as np

from flame.ir import symbolic
from flame.ir.dtypes import FP8_DTYPES, DType, bf16, boolean, f16, f32, f64, i8, i16, i32, i64, u8

# FP8 storage is cuda_fp8.h's raw byte; these convert it, rounding to nearest even WITHOUT saturation, as
# ml_dtypes and PyTorch convert: beyond the format's range (past the midpoint above its largest value) a
# value becomes NaN in e4m3 (sign kept) and inf in e5m2. From f32 the hardware's saturating conversion
# does the rounding inside the range; from f64 cuda_fp8.h's own conversion.
_FP8_HELPERS = """#ifndef FLAME_FP8_HELPERS
#define FLAME_FP8_HELPERS
static __device__ __forceinline__ float flame_from_f8e4m3(__nv_fp8_storage_t x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3))); }
static __device__ __forceinline__ float flame_from_f8e5m2(__nv_fp8_storage_t x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E5M2))); }
static __device__ __forceinline__ __nv_fp8_storage_t flame_to_f8e4m3(float x) {
  return fabsf(x) > 464.0f ? (__nv_fp8_storage_t)(signbit(x) ? 0xFF : 0x7F)
                           : __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
static __device__ __forceinline__ __nv_fp8_storage_t flame_to_f8e5m2(float x) {
  return fabsf(x) >= 61440.0f ? (__nv_fp8_storage_t)(signbit(x) ? 0xFC : 0x7C)
                              : __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }
static __device__ __forceinline__ __nv_fp8_storage_t flame_to_f8e4m3(double x) {
  return __nv_cvt_double_to_fp8(x, __NV_NOSAT, __NV_E4M3); }
static __device__ __forceinline__ __nv_fp8_storage_t flame_to_f8e5m2(double x) {
  return __nv_cvt_double_to_fp8(x, __NV_NOSAT, __NV_E5M2); }
#endif"""


def compute_dtype(d: DType) -> DType:
    """The dtype arithmetic happens in: f16/bf16 and the FP8 formats compute in f32, everything else in
    itself."""
    return f32 if d in (f16, bf16) or d.is_float8 else d


def kind(d: DType) -> str:
    """Snippet variant key of a dtype's compute type: f32, f64, int or bool."""
    c = compute_dtype(d)
    return c.name if c.is_float else ("int" if c.is_int else "bool")


def load(raw: str, d: DType) -> str:
    """A storage value (an lvalue such as in0[o]) as its compute type."""
    if d == f16:
        return f"__half2float({raw})"
    if d == bf16:
        return f"__bfloat162float({raw})"
    if d.is_float8:
        return f"flame_from_{d.name}({raw})"
    return raw


_TO_HALF = {f32: "__float2half_rn", f64: "__double2half", i32: "__int2half_rn", i64: "__ll2half_rn",
            i16: "__short2half_rn", i8: "__int2half_rn", u8: "__int2half_rn"}
_TO_BF16 = {f32: "__float2bfloat16_rn", f64: "__double2bfloat16", i32: "__int2bfloat16_rn", i64: "__ll2bfloat16_rn",
            i16: "__short2bfloat16_rn", i8: "__int2bfloat16_rn", u8: "__int2bfloat16_rn"}


def convert(expr: str, src: DType, dst: DType) -> str:
    """expr (of compute dtype src) as storage dtype dst, rounding once (NumPy's astype semantics)."""
    src = compute_dtype(src)
    if dst.is_float8:  # from f64 as double, from everything else as float (exact up to 2^24; FP8 ends at 57344)
        return f"flame_to_{dst.name}(({'double' if src == f64 else 'float'})({expr}))"
    if dst in (f16, bf16):
        table = _TO_HALF if dst == f16 else _TO_BF16
        if src == boolean:
            return f"{table[f32]}(({expr}) ? 1.0f : 0.0f)"
        return f"{table[src]}({expr})"
    if src == dst:
        return expr
    if dst == boolean:
        return f"(({expr}) != 0)"
    return f"(({dst.cuda_type})({expr}))"


def bind_rounded(name: str, expr: str, expr_dtype: DType, d: DType) -> tuple[list[str], str | None]:
    """The declarations of `name`: expr (computed in expr_dtype) rounded to d, in d's compute type; and
    for a d narrower than its compute type (f16, bf16, FP8) the name of the stored form the rounding made
    (`{name}_s`), which a store of the value writes as it is (converting the compute value back would round
    it twice more: for FP8, two conversions), else None."""
    c = compute_dtype(d).cuda_type
    if compute_dtype(d) == d:
        return [f"const {c} {name} = {load(convert(expr, expr_dtype, d), d)};"], None
    return [f"const {d.cuda_type} {name}_s = {convert(expr, expr_dtype, d)};",
            f"const {c} {name} = {load(f'{name}_s', d)};"], f"{name}_s"


def literal(value: float | int | bool, d: DType) -> str:
    """A C literal of d's COMPUTE type holding `value` rounded to d first (np.full semantics)."""
    c = compute_dtype(d)
    sized = None
    if isinstance(value, symbolic.SymFloat) and c == d and (c == f32 or (c == f64 and not value.f32)):
        sized = value.expr()
    if sized is not None:  # k / s0 of a dynamic size, rounded to d as np.full would
        return f"((float){sized})" if c == f32 else sized
    if isinstance(value, symbolic.SymInt) and symbolic.current() is not None and c in (i32, i64, f32, f64):
        return f"(({c.cuda_type})({value}))"  # a size of a dynamic dim (exact in every type listed)
    v = np.array(value).astype(d.np_dtype).astype(c.np_dtype)[()]
    if c == boolean:
        return "true" if v else "false"
    if c.is_int:
        iv, suffix = int(v), ("LL" if c == i64 else "")
        lo = -(1 << (8 * c.itemsize - 1))
        if iv == lo:
            return f"({lo + 1}{suffix} - 1)"
        return f"({iv}{suffix})" if iv < 0 else f"{iv}{suffix}"
    if not math.isfinite(float(v)):
        if c == f32:
            return f"__int_as_float(0x{int(np.float32(v).view(np.uint32)):08x})"
        return f"__longlong_as_double(0x{int(np.float64(v).view(np.uint64)):016x}LL)"
    text = (str(np.float32(v)) + "f") if c == f32 else repr(float(v))
    if "e" not in text and "." not in text:
        text = text.replace("f", ".0f") if c == f32 else text + ".0"
    return f"({text})" if text.startswith("-") else text


def lowest(d: DType) -> str:
    """The identity of max: -inf for floats, the smallest integer otherwise."""
    c = compute_dtype(d)
    return literal(-np.inf if c.is_float else np.iinfo(c.np_dtype).min, c)


def highest(d: DType) -> str:
    c = compute_dtype(d)
    return literal(np.inf if c.is_float else np.iinfo(c.np_dtype).max, c)


def identity(kind: str, d: DType) -> str:
    """The starting value of a reduction (snippets.Reduction.identity: zero, lowest or highest) in d."""
    return {"zero": lambda: literal(0, d), "lowest": lambda: lowest(d), "highest": lambda: highest(d)}[kind]()


def includes(dtypes) -> list[str]:
    """The #include lines the given dtypes need (none for f32/f64/ints/bool)."""
    out = []
    if f16 in dtypes:
        out.append("#include <cuda_fp16.h>")
    if bf16 in dtypes:
        out.append("#include <cuda_bf16.h>")
    if any(d in FP8_DTYPES for d in dtypes):
        out += ["#include <cuda_fp16.h>"] * (f16 not in dtypes) + ["#include <cuda_fp8.h>", _FP8_HELPERS]
    return out
