"""matmul: [..., m, k] @ [..., k, n] with broadcast batch dimensions (NumPy rules); matmul_bias: the
same product plus a bias [n] added before its one rounding (PyTorch's addmm and linear, cuBLASLt's bias
epilogue)."""

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


def _accumulated(a, b):
    """a @ b in its accumulator's precision: f32 for f16/bf16 operands, as cuBLAS accumulates."""
    # contiguous operands: BLAS takes another kernel for a transposed (strided) view, whose sums round
    # differently, and an operand's layout (an arena view, a permuted weight) must not change the bits
    # (OpenBLAS 0.3.31: eager vs checkpointed gradients differed by 1e-8)
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype.itemsize < 4:
        return np.matmul(a.astype(np.float32), b.astype(np.float32))
    return np.matmul(a, b)


def _matmul_ref(a, b):
    return _accumulated(a, b).astype(np.asarray(a).dtype, copy=False)


def _transposed(v) -> bool:
    """v is transpose_last(u): a permute swapping the last two dims (`x @ w.T` reads w so)."""
    op = v.producer
    if op is None or op.name != "permute":
        return False
    perm = tuple(op.attrs["perm"])
    n = len(perm)
    return n >= 2 and perm == (*range(n - 2), n - 1, n - 2)


def _product(b, p, q, transposed: bool):
    """p @ q, or when the operand it is the gradient of is a transpose, (q^T @ p^T)^T: the permute's
    own VJP then transposes it back and simplify cancels the two permutes, so the gradient of w in
    `x @ w.T` comes out of the GEMM in w's layout (the GEMM absorbs operand transposes) instead of
    as [in, out] that every reader (AdamW) would read transposed, uncoalesced."""
    if not transposed:
        return b.matmul(p, q)
    return b.transpose_last(b.matmul(b.transpose_last(q), b.transpose_last(p)))


def _matmul_vjp(b, g, x, y, out):
    gx = _product(b, g, b.transpose_last(y), _transposed(x))
    if y.type.rank == 2 and x.type.rank > 2:
        # a weight shared by every batch (x @ w in a Linear layer): its gradient is ONE GEMM over
        # K = batch * m, x^T g with both flattened to 2-D, instead of a batched GEMM into a
        # [batch, k, n] temporary summed over the batch afterwards
        k, n = x.type.shape[-1], g.type.shape[-1]
        rows = x.type.numel // k if k else int(np.prod(x.type.shape[:-1]))
        x2, g2 = b.reshape(x, shape=[rows, k]), b.reshape(g, shape=[rows, n])
        return gx, _product(b, b.transpose_last(x2), g2, _transposed(y))
    return gx, _product(b, b.transpose_last(x), g, _transposed(y))


MATMUL = register(OpDef("matmul", "matmul", 2, _matmul_infer, _matmul_ref, {}, _matmul_vjp, library="matmul",
                        autocast="lower", accumulates=True))


def _matmul_bias_infer(types):
    a, b, bias = types
    out = _matmul_infer([a, b])
    if bias.dtype != out.dtype:
        raise DTypeError(f"matmul_bias {a} @ {b} + {bias}: the bias's dtype differs ({bias.dtype} vs {out.dtype})")
    if bias.shape != out.shape[-1:]:
        raise ShapeError(f"matmul_bias {a} @ {b} + {bias}: the bias must be a vector of the product's "
                         f"{out.shape[-1]} columns")
    return out


def _matmul_bias_ref(a, b, bias):
    """The product and the bias summed in the accumulator's precision (f32 for f16/bf16) and rounded
    once, as PyTorch's addmm and cuBLASLt's bias epilogue."""
    acc = _accumulated(a, b)
    return (acc + np.asarray(bias).astype(acc.dtype, copy=False)).astype(np.asarray(a).dtype, copy=False)


def _matmul_bias_vjp(b, g, x, y, bias, out):
    gbias = b.sum_to(g, bias.type.shape)  # first, as the VJP of the add of a bias after a matmul emits it
    return (*_matmul_vjp(b, g, x, y, out), gbias)


MATMUL_BIAS = register(OpDef("matmul_bias", "matmul", 3, _matmul_bias_infer, _matmul_bias_ref, {}, _matmul_bias_vjp,
                             library="matmul", autocast="lower", accumulates=True, gemm_bias=True))
