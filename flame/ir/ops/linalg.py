"""matmul: [..., m, k] @ [..., k, n] with broadcast batch dimensions (NumPy rules)."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, ShapeError
from flame.ir.ops._shapes import broadcast_shapes
from flame.ir.registry import OpDef, check_dtype, register
from flame.ir.types import TensorType


def _matmul_infer(types):
    a, b = types
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul {a} @ {b}: dtypes differ ({a.dtype} vs {b.dtype})")
    check_dtype("matmul", a, ("float",))
    if a.rank < 2 or b.rank < 2:
        raise ShapeError(f"matmul {a} @ {b}: both operands need rank >= 2 in the IR")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul {a} @ {b}: inner dimensions differ ({a.shape[-1]} vs {b.shape[-2]})")
    batch = broadcast_shapes("matmul", [a.with_shape(a.shape[:-2]), b.with_shape(b.shape[:-2])])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _matmul_ref(a, b):
    if a.dtype.itemsize < 4:  # f16/bf16: accumulate in f32, as cuBLAS does
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return np.matmul(a, b)


def _matmul_vjp(b, g, x, y, out):
    gx = b.matmul(g, b.transpose_last(y))
    if y.type.rank == 2 and x.type.rank > 2:
        # a weight shared by every batch (x @ w in a Linear layer): its gradient is ONE GEMM over
        # K = batch * m, x^T g with both flattened to 2-D, instead of a batched GEMM into a
        # [batch, k, n] temporary summed over the batch afterwards
        k, n = x.type.shape[-1], g.type.shape[-1]
        rows = x.type.numel // k if k else int(np.prod(x.type.shape[:-1]))
        x2, g2 = b.reshape(x, shape=[rows, k]), b.reshape(g, shape=[rows, n])
        return gx, b.matmul(b.transpose_last(x2), g2)
    return gx, b.matmul(b.transpose_last(x), g)


register(OpDef("matmul", "matmul", 2, _matmul_infer, _matmul_ref, {}, _matmul_vjp, library="matmul",
               autocast="lower"))
