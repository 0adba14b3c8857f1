"""torch.linalg's norms and products composed of flame's ops, with torch's names, parameters, values,
dtypes, gradients and errors (flame.linalg re-exports them):
- norm, matrix_norm: the matrix norms 'fro', 1, -1, inf and -inf as torch computes them (a vector norm
  over one dim, then the largest or smallest over the other); 'nuc', 2 and -2 need singular values,
  which flame has no op for: they raise NotImplementedError after torch's argument checks pass;
- multi_dot: torch's multiplication order (the cheapest by the matrix-chain cost, as its
  matrix_chain_order), so the rounding of every product is torch's;
- vecdot, matrix_power (torch's binary decomposition of n; a negative n needs the inverse, which flame
  does not have) and vander (torch.linalg's: increasing powers, batched)."""

from __future__ import annotations

import math

from flame.errors import ArgumentRangeError, ArgumentTypeError, DTypeError, ShapeError
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import eye
from flame.frontend.norms import norm_dtype_checks, torch_dtype_name, vector_norm
from flame.frontend.tensor import Tensor, dim_index
from flame.frontend.tensor_core import cat, full, matmul, where
from flame.ir.dtypes import bf16, boolean, f16, f32, f64, i8, i16, i32, i64, u8

__all__ = ["matrix_norm", "matrix_power", "multi_dot", "norm", "vander", "vecdot"]

_SVD_ORDS = ("nuc", 2, -2)
_TYPE_META = {f64: "double", f32: "float", f16: "c10::Half", bf16: "c10::BFloat16", i64: "long int", i32: "int",
              i16: "short", i8: "signed char", u8: "unsigned char",
              boolean: "bool"}  # dtypes as caffe2's TypeMeta names them


def _loc() -> str:
    return f"\n  at {user_location()}"


def _ord_text(ord) -> str:  # noqa: A002
    """ord as torch's messages print it (a C++ double: 3, 0.5, inf)."""
    if isinstance(ord, str):
        return ord
    v = float(ord)
    return str(int(v)) if v.is_integer() else str(v)


def _check_matrix_ord(ord) -> None:  # noqa: A002
    if isinstance(ord, str):
        ok = ord in ("fro", "nuc")
    else:
        ok = isinstance(ord, (int, float)) and not isinstance(ord, bool) and abs(float(ord)) in (1.0, 2.0, math.inf)
    if not ok:
        raise ArgumentRangeError(f"linalg.matrix_norm: Order {_ord_text(ord)} not supported.{_loc()}")


def _matrix_dims(A: Tensor, dim, dtype) -> tuple[int, int]:  # noqa: N803
    """torch's _linalg_matrix_norm_checks: A at least 2-D and floating, dim two different dims, dtype=
    a floating one A converts to without narrowing; the dims made non-negative."""
    if A.ndim < 2:
        raise ShapeError(f"linalg.matrix_norm: The input tensor A must have at least 2 dimensions.{_loc()}")
    norm_dtype_checks("linalg.matrix_norm", A, None)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dims) != 2:
        raise ShapeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dims))}{_loc()}")
    d0, d1 = (dim_index("linalg.matrix_norm", d, A.ndim) for d in dims)
    if d0 == d1:
        raise ShapeError(f"linalg.matrix_norm: dims must be different. Got ({d0}, {d1}){_loc()}")
    norm_dtype_checks("linalg.matrix_norm", A, dtype)
    return d0, d1


def matrix_norm(input: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The matrix ord-norm of input (torch's documentation calls it A) over the two dims `dim` (its batch
    over the others), as torch.linalg.matrix_norm: 'fro' (default; the 2-norm of the entries), 1 / -1 (the
    largest / smallest column sum of |A|), inf / -inf (the same of the rows). 'nuc', 2 and -2 (sums and
    extremes of the singular values) raise NotImplementedError: flame has no SVD."""
    A = input  # noqa: N806
    _check_matrix_ord(ord)
    d0, d1 = _matrix_dims(A, dim, dtype)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim, dtype=dtype)
    if ord in _SVD_ORDS:
        raise NotImplementedError(
            f"linalg.matrix_norm: ord={ord!r} needs the singular values of A (torch.linalg.svdvals), and flame has "
            f"no SVD; ord='fro', 1, -1, inf or -inf compute in flame, or take the singular values on the host "
            f"(numpy.linalg.svd(A.numpy(), compute_uv=False)), without a gradient{_loc()}")
    if abs(float(ord)) == math.inf:  # the inf-norm is the 1-norm of the transpose
        d0, d1 = d1, d0
    if not keepdim and d0 < d1:  # the first reduction drops a dim in front of d1
        d1 -= 1
    sums = vector_norm(A, 1, d0, keepdim, dtype=dtype)
    if float(ord) < 0:
        return sums.amin(d1, keepdim)
    return sums.amax(d1, keepdim) if sums.shape[d1] else sums.sum(d1, keepdim)  # torch's 0 over no sums


def norm(input: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """A vector or matrix norm, as torch.linalg.norm: with dim of two dims, or without dim for a 2-D
    input, and an ord given, the matrix norm (matrix_norm); else the vector norm (vector_norm, ord 2 by
    default; ord=None over every dim is the 2-norm of all entries whatever the rank)."""
    dims = None if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    if dims is not None:
        if len(dims) not in (1, 2):
            raise ShapeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got "
                             f"[{', '.join(map(str, dims))}]{_loc()}")
    elif ord is not None and input.ndim not in (1, 2):
        raise ShapeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                         f"{input.ndim}D.{_loc()}")
    if isinstance(ord, str) or (ord is not None and (dims is None and input.ndim == 2 or dims and len(dims) == 2)):
        return matrix_norm(input, ord, (0, 1) if dims is None else dims, keepdim, dtype=dtype)
    return vector_norm(input, 2 if ord is None else ord, dims, keepdim, dtype=dtype)


def multi_dot(tensors) -> Tensor:
    """The product of two or more matrices, the first and last may be vectors (a row and a column
    vector, dropped from the result's shape), as torch.linalg.multi_dot: multiplied in the order of
    fewest multiply-adds (torch's choice, so each product rounds as torch's)."""
    ts = list(tensors)
    n = len(ts)
    if n < 2:
        raise ArgumentRangeError(f"multi_dot(): expected at least 2 tensors but got {n}{_loc()}")
    for t, end in ((ts[0], "first"), (ts[-1], "last")):
        if t.ndim not in (1, 2):
            raise ShapeError(f"multi_dot(): the {end} tensor must be 1D or 2D but got {t.ndim}D{_loc()}")
    for i in range(1, n - 1):
        if ts[i].ndim != 2:
            raise ShapeError(f"multi_dot(): tensor {i} must be 2D but got {ts[i].ndim}D{_loc()}")
    out_shape = ([ts[0].shape[0]] if ts[0].ndim == 2 else []) + ([ts[-1].shape[1]] if ts[-1].ndim == 2 else [])
    mats = [ts[0] if ts[0].ndim == 2 else ts[0].unsqueeze(0), *ts[1:-1],
            ts[-1] if ts[-1].ndim == 2 else ts[-1].unsqueeze(-1)]
    for i in range(1, n):
        if mats[i].dtype != mats[0].dtype:
            raise DTypeError(f"multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                             f"{_TYPE_META[mats[0].dtype]} and tensor {i} {_TYPE_META[mats[i].dtype]}{_loc()}")
        if mats[i - 1].shape[-1] != mats[i].shape[0]:
            raise ShapeError(f"multi_dot(): tensors {i - 1} and {i} with shapes {list(ts[i - 1].shape)} and "
                             f"{list(ts[i].shape)} cannot be multiplied{_loc()}")
    split = _chain_order([m.shape[0] for m in mats] + [mats[-1].shape[1]])
    return _chain_product(mats, split, 0, n - 1).reshape(out_shape)


def _chain_order(p: list[int]) -> dict[tuple[int, int], int]:
    """torch's matrix_chain_order for matrices i of p[i] x p[i + 1]: split[i, j] = the k at which the
    product of matrices i..j is cheapest split into (i..k)(k+1..j), the first k of the cheapest on ties.
    Three matrices take torch's closed form (its own branch, which prefers (AB)C on a tie)."""
    n = len(p) - 1
    if n == 3:
        a, b, c, d = p
        return {(0, 2): 0 if a * c * (b + d) > b * d * (a + c) else 1, (0, 1): 0, (1, 2): 1}
    cost, split = {(i, i): 0 for i in range(n)}, {}
    for span in range(1, n):
        for i in range(n - span):
            j = i + span
            best = None
            for k in range(i, j):
                q = cost[i, k] + cost[k + 1, j] + p[i] * p[k + 1] * p[j + 1]
                if best is None or q < best:
                    best, split[i, j] = q, k
            cost[i, j] = best
    return split


def _chain_product(mats: list[Tensor], split, i: int, j: int) -> Tensor:
    if i == j:
        return mats[i]
    k = split[i, j]
    return matmul(_chain_product(mats, split, i, k), _chain_product(mats, split, k + 1, j))


@policy("lower")  # autocast: on PyTorch's CUDA and CPU lower-precision lists
def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """The dot product of x and y along dim (they broadcast), as torch.linalg.vecdot."""
    norm_dtype_checks("linalg.vecdot", x, None)
    if y.dtype != x.dtype:
        raise DTypeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                         f"{torch_dtype_name(x.dtype)} and y of type {torch_dtype_name(y.dtype)} instead{_loc()}")
    return (x * y).sum(dim)


def matrix_power(input: Tensor, n: int) -> Tensor:  # noqa: A002
    """A @ A @ ... (n factors) of square matrices A = input [..., m, m], as torch.linalg.matrix_power: the
    identity for n = 0 (with a zero gradient), else torch's products (n = 2, 3 directly, larger n by
    repeated squaring; integer matrices wrap in their dtype, as torch's CPU). A negative n needs A's
    inverse: torch's error for an integer A; flame has no inverse (NotImplementedError)."""
    A = input  # noqa: N806
    if not isinstance(n, int) or isinstance(n, bool):
        raise ArgumentTypeError(f"linalg_matrix_power(): argument 'n' (position 2) must be int, not "
                                f"{type(n).__name__}{_loc()}")
    if A.ndim < 2:
        raise ShapeError(f"linalg.matrix_power: The input tensor A must have at least 2 dimensions.{_loc()}")
    if A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"linalg.matrix_power: A must be batches of square matrices, but they are "
                         f"{A.shape[-2]} by {A.shape[-1]} matrices{_loc()}")
    if n == 0:  # the identity, A in the graph with a zero gradient (torch's clone, then copy_)
        return where(full((), True, dtype=boolean), eye(A.shape[-1], dtype=A.dtype), A)
    if n < 0 and not A.dtype.is_floating_point:
        raise DTypeError(f"linalg.inv: Expected a floating point or complex tensor as input. Got {A.dtype}{_loc()}")
    if n < 0:
        raise NotImplementedError(
            f"linalg.matrix_power: n={n} needs the inverse of A (torch.linalg.inv), and flame has no matrix "
            f"inverse; raise the inverse computed on the host (numpy.linalg.inv(A.numpy())) to the power {-n}, "
            f"without a gradient{_loc()}")
    if n == 1:
        return A.clone()
    if n <= 3:
        return matmul(A, A) if n == 2 else matmul(matmul(A, A), A)
    z = result = None
    while n > 0:  # from the least significant bit: z = A^(2^k), multiplied in where bit k is set
        bit, n = n % 2, n // 2
        z = A if z is None else matmul(z, z)
        if bit:
            result = z if result is None else matmul(result, z)
    return result


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803
    """The Vandermonde matrix of x [..., n]: [..., n, N] of the powers x**0, x**1, ..., x**(N-1) (N
    defaults to n), as torch.linalg.vander (integers give int64; a 0-d x counts as one element)."""
    if x.dtype not in (f32, f64) and not x.dtype.is_int:
        raise DTypeError(f"linalg.vander supports floating point, complex, and integer tensors, but got "
                         f"{torch_dtype_name(x.dtype)}{_loc()}")
    x = x.unsqueeze(-1) if x.ndim == 0 else x
    n = x.shape[-1] if N is None else N
    if n <= 1:
        raise ArgumentRangeError(f"N must be greater than 1.{_loc()}")
    x = x if x.dtype.is_float else x.to(i64)  # torch's cumprod of integers: int64
    powers = x.unsqueeze(-1).expand(*x.shape, n - 1).cumprod(-1)
    return cat([full((*x.shape, 1), 1, dtype=powers.dtype), powers], -1)
