"""alpha * (a @ b) + beta * c for f16/bf16 operands as PyTorch's addmm, baddbmm and linear compute it: the
product's f32 accumulator scaled, the f32 input added, and the sum rounded ONCE to the result's dtype,
for any `c` that broadcasts to the product (a full matrix, a row, a column, a batch of them) and any
alpha and beta. The bias vector with alpha = beta = 1 is the IR's matmul_bias instead (`matmul_add`),
which cuBLASLt runs as its bias epilogue.

The forward is a product of the operands widened to f32 (f16 and bf16 products are exact in f32, so its
sums are the low-precision GEMM's f32 accumulator) and an f32 elementwise tail with one rounding: plain
ops that both executors run. With beta = 0 the input is not read, so its NaN and inf do not reach the
result, as in PyTorch. The gradients are PyTorch's formulas, each op rounded to the operands' dtype as
torch's are: d/da = (g @ b^T) * alpha, d/db = (a^T @ g) * alpha (the product rounded, then the scaled
value), d/dc = (g * beta) summed over c's broadcast dims."""

from __future__ import annotations

from flame.frontend.autocast import autocast
from flame.frontend.custom_function import Function
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import matmul
from flame.ir.dtypes import bf16, f16, f32

LOW = (f16, bf16)


def matmul_add(input, other, bias) -> Tensor:  # noqa: A002
    """`input @ other + bias` as PyTorch's linear, addmm and baddbmm compute it: for a bias vector over the
    product's columns (size-1 dims before them) of the operands' one floating dtype, added to the f32
    accumulator before the one rounding of an f16/bf16 result (the IR's matmul_bias: cuBLASLt's bias
    epilogue); any other bias is added to the product afterwards, with PyTorch's broadcasting and
    promotion (matmul's dtype rule applies to input and other)."""
    a, b = (x if isinstance(x, Tensor) else Tensor(x) for x in (input, other))
    bias = bias if isinstance(bias, Tensor) else Tensor(bias)
    vector = (a.ndim >= 1 and b.ndim >= 2 and 1 <= bias.ndim <= max(a.ndim, b.ndim)
              and bias.shape[-1] == b.shape[-1] and all(d == 1 for d in bias.shape[:-1]))
    if not vector or not a.dtype.is_float or len({a.dtype, b.dtype, bias.dtype}) > 1:
        return matmul(a, b) + bias
    a1 = a.ndim == 1
    out = apply("matmul_bias", a.unsqueeze(0) if a1 else a, b, bias.reshape(bias.shape[-1]))
    return out.squeeze(out.ndim - 2) if a1 else out


def rounds_once(a: Tensor, b: Tensor, c, product_shape: tuple[int, ...]) -> bool:
    """Whether scaled_add computes a @ b with c: all three f16 or bf16 tensors of one dtype, and c
    broadcasting to the product's shape without growing it (anything else keeps the caller's path)."""
    if not isinstance(c, Tensor) or a.dtype not in LOW or len({a.dtype, b.dtype, c.dtype}) > 1:
        return False
    if c.ndim > len(product_shape):
        return False
    tail = product_shape[len(product_shape) - c.ndim :]
    return all(d in (1, t) for d, t in zip(c.shape, tail))


def bias_vector(c, n: int) -> bool:
    """c is a vector over a product's n columns (size-1 dims before them): the IR's matmul_bias takes it."""
    return isinstance(c, Tensor) and c.ndim >= 1 and c.shape[-1] == n and all(d == 1 for d in c.shape[:-1])


def _scaled(x: Tensor, s: float) -> Tensor:
    """x * s computed in f32 with s as an f32 (PyTorch's opmath for a scalar), rounded once to x's dtype."""
    return x if s == 1 else (x.to(f32) * s).to(x.dtype)


def _summed_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """g summed over the dims that broadcasting a tensor of `shape` to g's shape added or stretched."""
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    return (g.sum(dims, keepdim=True) if dims else g).reshape(shape)


class _ScaledAdd(Function):
    """alpha * (a @ b) + beta * c rounded once (module doc); a [..., m, k], b [..., k, n]."""

    @staticmethod
    def forward(ctx, a, b, c, alpha, beta):
        ctx.save_for_backward(a, b)
        ctx.scales, ctx.c_shape = (alpha, beta), tuple(c.shape)
        with autocast(enabled=False):  # the widened product stays f32 inside an autocast region
            acc = _scaled(matmul(a.to(f32), b.to(f32)), alpha)
            if beta != 0:  # torch does not read the input when beta is 0
                acc = acc + _scaled(c.to(f32), beta)
            return acc.to(a.dtype)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        alpha, beta = ctx.scales
        with autocast(enabled=False):
            ga = _scaled(matmul(g, b.transpose(-1, -2)), alpha)
            gb = _scaled(matmul(a.transpose(-1, -2), g), alpha)
            gc = _summed_to(_scaled(g, beta), ctx.c_shape)
        return ga, gb, gc, None, None


def scaled_add(a: Tensor, b: Tensor, c: Tensor, alpha: float = 1, beta: float = 1) -> Tensor:
    """alpha * (a @ b) + beta * c rounded once to the f16/bf16 dtype of a, b and c (module doc); callers
    check rounds_once first."""
    return _ScaledAdd.apply(a, b, c, alpha, beta)
