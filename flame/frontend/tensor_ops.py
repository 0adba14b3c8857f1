"""Tensor methods beyond the core of tensor.py, with PyTorch's names and semantics, each composed from
IR ops: sorting and selection (sort, argsort, topk, narrow), scans (cumsum, cumprod), tests (any, all,
isnan, isinf, isfinite), splitting and tiling (split, chunk, repeat, tile, repeat_interleave), norms,
floor division and remainder, clamp, masked_fill; PyTorch's other spellings (add ... div with
rounding_mode, eq ... ge, logical_and/or, mm bmm dot outer addmm baddbmm tensordot kron cross,
logsumexp), accurate log1p/expm1 and what is built on them, order statistics (kthvalue, median),
prod, nansum/nanmean, cov/corrcoef, diagonals, take_along_dim/index_add/masked_select, lerp/addcmul/
addcdiv and their in-place forms; the new_* constructors. Tensor inherits them; flame.frontend.ops
makes the function forms."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from flame.errors import DTypeError, ShapeError, TraceError
from flame.frontend import tensor as _t  # circular: used at call time only
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.ir.dtypes import boolean, dtype_of, f32, i64, promote

SortResult = namedtuple("sort", ["values", "indices"])
TopkResult = namedtuple("topk", ["values", "indices"])
KthvalueResult = namedtuple("kthvalue", ["values", "indices"])
MedianResult = namedtuple("median", ["values", "indices"])


def _is_number(x) -> bool:
    return isinstance(x, (int, float, bool, np.number, np.bool_))


def _ranks(op: str, *pairs) -> None:
    """Each (tensor, rank) pair's tensor has that rank, else a ShapeError naming the op and the user's line."""
    for x, rank in pairs:
        if not isinstance(x, _t.Tensor) or x.ndim != rank:
            got = list(x.shape) if isinstance(x, _t.Tensor) else type(x).__name__
            raise ShapeError(f"{op}: expects {rank}-D tensors, got {got}\n  at {user_location()}")


def _bool(x):
    return x if x.dtype == boolean else x != 0


def _tensor(x, like):
    """x as a Tensor (a Python number as a 0-d tensor of its own type, as PyTorch promotes it)."""
    return x if isinstance(x, _t.Tensor) else _t.Tensor(np.asarray(x))


class TensorOps:
    """The mixin Tensor inherits (no state of its own)."""

    __slots__ = ()

    # ---- sorting and selection ----------------------------------------------------------------------
    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """Indices that sort along dim. Always stable (equal elements keep their order); NaN sorts as
        larger than any number, as in PyTorch."""
        axis = _t.dim_index("argsort", dim, self.ndim)
        return apply("argsort", self, axis=axis, descending=bool(descending))

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """(values, indices) sorted along dim (stable; values differentiable through the gather)."""
        idx = self.argsort(dim, descending)
        if self.ndim == 0:
            return SortResult(self, idx)
        return SortResult(self.gather(dim, idx), idx)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
        """(values, indices) of the k largest (or smallest) elements along dim, in sorted order; ties
        keep the lower index first."""
        axis = _t.dim_index("topk", dim, self.ndim)
        x = self if self.ndim else self.reshape(1)
        n = x.shape[axis]
        if not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
            raise ShapeError(f"topk: k={k!r} is out of range for dimension {dim} of size {n} (expected 0 <= k <= {n})"
                             f"\n  at {user_location()}")
        idx = apply("argsort", x, axis=axis, descending=bool(largest)).narrow(axis, 0, int(k))
        vals = x.gather(axis, idx)
        if self.ndim == 0:
            return TopkResult(vals.reshape(()), idx.reshape(()))
        return TopkResult(vals, idx)

    def narrow(self, dim: int, start: int, length: int):
        """Elements start .. start+length-1 along dim (a slice)."""
        axis = _t.dim_index("narrow", dim, self.ndim)
        n = self.shape[axis]
        start = start + n if start < 0 else start
        if not 0 <= start <= n or length < 0 or start + length > n:
            raise ShapeError(f"narrow: start {start} and length {length} exceed dimension {dim} of size {n}"
                             f"\n  at {user_location()}")
        if (start, length) == (0, n):
            return self
        starts, stops = [0] * self.ndim, list(self.shape)
        starts[axis], stops[axis] = start, start + length
        return apply("slice", self, starts=starts, stops=stops, steps=[1] * self.ndim)

    # ---- scans ------------------------------------------------------------------------------------------
    def _scan(self, name: str, dim: int, dtype):
        x = self.to(dtype) if dtype is not None else self
        if dtype is None and not x.dtype.is_float:  # PyTorch scans bool and integers in int64
            x = x.to(i64)
        return apply(name, x, axis=_t.dim_index(name, dim, self.ndim))

    def cumsum(self, dim: int, dtype=None):
        """Running sum along dim (integers and bool accumulate in int64, as in PyTorch)."""
        return self._scan("cumsum", dim, dtype)

    def cumprod(self, dim: int, dtype=None):
        """Running product along dim; its gradient is exact where the input has zeros."""
        return self._scan("cumprod", dim, dtype)

    # ---- tests --------------------------------------------------------------------------------------------
    def _truth(self):
        return self if self.dtype == boolean else self != 0

    def any(self, dim=None, keepdim: bool = False):
        """True where some element (along dim) is nonzero."""
        return self._truth().sum(dim, keepdim=keepdim) > 0

    def all(self, dim=None, keepdim: bool = False):
        """True where every element (along dim) is nonzero (also over zero elements)."""
        return (~self._truth()).sum(dim, keepdim=keepdim) == 0

    def isnan(self):
        return self != self if self.dtype.is_float else _t.full(self.shape, False, boolean)

    def isinf(self):
        return self.abs() == float("inf") if self.dtype.is_float else _t.full(self.shape, False, boolean)

    def isfinite(self):
        return self.abs() < float("inf") if self.dtype.is_float else _t.full(self.shape, True, boolean)

    # ---- splitting and tiling -----------------------------------------------------------------------------
    def split(self, split_size_or_sections, dim: int = 0):
        """Pieces of split_size along dim (the last one smaller), or of the listed sizes."""
        axis = _t.dim_index("split", dim, self.ndim)
        n = self.shape[axis]
        if isinstance(split_size_or_sections, (int, np.integer)):
            size = int(split_size_or_sections)
            if size <= 0 and not (size == 0 and n == 0):
                raise ShapeError(f"split: split_size must be positive, got {size}\n  at {user_location()}")
            sizes = [size] * (n // size) + ([n % size] if n % size else []) if size else [0]
        else:
            sizes = [int(s) for s in split_size_or_sections]
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise ShapeError(f"split: sizes {sizes} must be non-negative and sum to the size of dimension {dim} "
                                 f"({n})\n  at {user_location()}")
        out, at = [], 0
        for s in sizes:
            out.append(self.narrow(axis, at, s))
            at += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0):
        """At most `chunks` pieces of ceil(n / chunks) along dim (PyTorch's torch.chunk)."""
        if chunks <= 0:
            raise ShapeError(f"chunk: chunks must be positive, got {chunks}\n  at {user_location()}")
        n = self.shape[_t.dim_index("chunk", dim, self.ndim)]
        if n == 0:
            return tuple(self for _ in range(chunks))
        return self.split(-(-n // chunks), dim)

    def repeat(self, *sizes):
        """Tile the tensor sizes[i] times along dim i (leading extra sizes add new dims)."""
        sizes = _t._shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} repeat sizes for a tensor of {self.ndim} dimensions (need at least "
                             f"one per dimension)\n  at {user_location()}")
        if any(s < 0 for s in sizes):
            raise ShapeError(f"repeat: sizes {list(sizes)} must be non-negative\n  at {user_location()}")
        shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        x = self.reshape(*[d for s in shape for d in (1, s)])
        x = x.broadcast_to([d for r, s in zip(sizes, shape) for d in (r, s)])
        return x.reshape(*[r * s for r, s in zip(sizes, shape)])

    def tile(self, *dims):
        """repeat(), with missing leading sizes taken as 1 (torch.tile)."""
        dims = _t._shape_arg(dims)
        return self.repeat(*((1,) * (self.ndim - len(dims)) + tuple(dims)))

    def repeat_interleave(self, repeats, dim: int | None = None, output_size: int | None = None):
        """Repeat each element (each slice along dim) repeats times; repeats is an int or one count per
        element. Inside @flame.compile a tensor of counts needs output_size (the result's length)."""
        x, axis = (self.reshape(-1), 0) if dim is None else (self, _t.dim_index("repeat_interleave", dim, self.ndim))
        if isinstance(repeats, _t.Tensor) and repeats.numel() == 1 and repeats._value is None:
            repeats = int(repeats.item())
        if isinstance(repeats, (int, np.integer)):
            r = int(repeats)
            y = x.unsqueeze(axis + 1)
            y = y.broadcast_to(*y.shape[:axis + 1], r, *y.shape[axis + 2:])
            return y.reshape(*x.shape[:axis], x.shape[axis] * r, *x.shape[axis + 1:])
        repeats = repeats if isinstance(repeats, _t.Tensor) else _t.Tensor(np.asarray(repeats, np.int64))
        if repeats.shape != (x.shape[axis],):
            raise ShapeError(f"repeat_interleave: repeats {list(repeats.shape)} must have one count per element of "
                             f"dimension {axis} ({x.shape[axis]})\n  at {user_location()}")
        if output_size is None:
            if repeats._value is not None:
                raise TraceError("repeat_interleave with a tensor of repeats inside @flame.compile needs "
                                 f"output_size= (the result's length depends on the counts)\n  at {user_location()}")
            output_size = int(repeats.sum().item())
        from flame.frontend.creation import arange

        ends = repeats.to(i64).cumsum(0)  # position j comes from the element whose range holds it
        src = (ends.unsqueeze(0) <= arange(int(output_size)).unsqueeze(1)).sum(1)
        return apply("index_select", x, src, axis=axis)

    # ---- norms --------------------------------------------------------------------------------------------
    def norm(self, p="fro", dim=None, keepdim: bool = False, dtype=None):
        """torch.norm for vectors: p = 'fro'/2, 1, inf, -inf, 0 or any number, over dim (all by default).
        The gradient of the 2-norm at zero is zero, as in PyTorch."""
        from flame.frontend.ops import vector_norm

        if p == "nuc" or (p == "fro" and dim is not None and not isinstance(dim, int) and len(dim) > 2):
            raise ShapeError(f"norm: p={p!r} (matrix norms) is not supported\n  at {user_location()}")
        return vector_norm(self, 2 if p == "fro" else p, dim, keepdim, dtype=dtype)

    # ---- floor division and remainder -------------------------------------------------------------------
    def __floordiv__(self, o):
        return _t.binary("floor_divide", self, o)

    def __rfloordiv__(self, o):
        return _t.binary("floor_divide", o, self)

    def __mod__(self, o):
        return _t.binary("remainder", self, o)

    def __rmod__(self, o):
        return _t.binary("remainder", o, self)

    def floor_divide(self, o):
        """Quotient rounded toward -inf (Python's //)."""
        return _t.binary("floor_divide", self, o)

    def remainder(self, o):
        """Python's %: self - floor(self / o) * o, with the sign of o."""
        return _t.binary("remainder", self, o)

    # ---- clamp and masked_fill --------------------------------------------------------------------------
    def clamp(self, min=None, max=None):  # noqa: A002
        """Elementwise min(max(x, min), max); min and max may be numbers or tensors. Where min > max the
        result is max; NaN stays NaN. The gradient goes to x where min <= x <= max, else to the bound
        that won (none for NaN), as in PyTorch."""
        if min is None and max is None:
            raise ShapeError(f"clamp: at least one of 'min' or 'max' must not be None\n  at {user_location()}")
        dt = self.dtype
        for bound in (min, max):
            if isinstance(bound, _t.Tensor):
                dt = promote(dt, bound.dtype)
            elif isinstance(bound, (float, np.floating)) and not dt.is_float:
                dt = f32
        out = self.to(dt)
        if min is not None:
            lo = min.to(dt) if isinstance(min, _t.Tensor) else min
            out = apply("where", out < lo, lo if isinstance(lo, _t.Tensor) else _t.full((), lo, dt), out)
        if max is not None:
            hi = max.to(dt) if isinstance(max, _t.Tensor) else max
            out = apply("where", out > hi, hi if isinstance(hi, _t.Tensor) else _t.full((), hi, dt), out)
        if dt.is_float:  # NaN stays NaN, with no gradient (PyTorch's mask min <= x <= max is False there)
            x = self.to(dt)
            out = apply("where", x != x, x.detach(), out)
        return out

    clip = clamp

    def clamp_min(self, min):  # noqa: A002
        return self.clamp(min=min)

    def clamp_max(self, max):  # noqa: A002
        return self.clamp(max=max)

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self._inplace(lambda x: x.clamp(min, max), min, max)

    clip_ = clamp_

    def masked_fill(self, mask, value):
        """value where mask is True (mask broadcasts to self's shape), self elsewhere."""
        from flame.ir.ops._shapes import broadcast_shapes

        if not isinstance(mask, _t.Tensor) or mask.dtype != boolean:
            got = mask.dtype if isinstance(mask, _t.Tensor) else type(mask).__name__
            raise DTypeError(f"masked_fill: the mask must be a bool tensor, got {got}\n  at {user_location()}")
        if broadcast_shapes("masked_fill", [mask._type(), self._type()]) != tuple(self.shape):
            raise ShapeError(f"masked_fill: mask {list(mask.shape)} does not broadcast to the shape of the tensor "
                             f"{list(self.shape)}\n  at {user_location()}")
        if isinstance(value, _t.Tensor):
            if value.ndim:
                raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got shape {list(value.shape)}"
                                 f"\n  at {user_location()}")
            value = value.to(self.dtype)
        else:
            value = _t.full((), value, self.dtype)
        return apply("where", mask, value, self)

    def masked_fill_(self, mask, value):
        return self._inplace(lambda x: x.masked_fill(mask, value), value)

    def _inplace(self, fn, *others):
        from flame.frontend.indexing import assign, stand_in

        assign(self, fn(stand_in(self, *others)))
        return self

    # ---- PyTorch's other spellings: arithmetic, comparisons, products --------------------------------
    def add(self, other, *, alpha=1):
        """self + alpha * other, as torch.add."""
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, *, alpha=1):
        """self - alpha * other, as torch.sub."""
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other, *, rounding_mode: str | None = None):
        """self / other, as torch.div: true division (integers give f32), or rounded toward zero
        (rounding_mode="trunc") or down ("floor"), which keep an integer dtype."""
        if rounding_mode is None:
            return self / other
        if rounding_mode == "floor":
            return self // other
        if rounding_mode != "trunc":
            raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        from flame.frontend.ops import where

        floor = self // other
        if floor.dtype.is_float:
            q = self / other
            return where(q < 0, (-q).floor().neg(), floor).to(floor.dtype)
        # integers: floor division rounds down; toward zero differs when the remainder is nonzero and
        # the signs differ
        rest = self - floor * other
        return where((rest != 0) & ((self < 0) != (_tensor(other, self) < 0)), floor + 1, floor)

    def true_divide(self, other):
        return self / other

    def div_(self, other, *, rounding_mode: str | None = None):
        return self.copy_(self.div(other, rounding_mode=rounding_mode))

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    def logical_and(self, other):
        """Both nonzero, as torch.logical_and (any dtypes; a bool result)."""
        return _bool(self) & _bool(_tensor(other, self))

    def logical_or(self, other):
        return _bool(self) | _bool(_tensor(other, self))

    def where(self, condition, other):
        """self where condition holds, else other: torch.where(condition, self, other)."""
        from flame.frontend.ops import where

        return where(condition, self, other)

    def matmul(self, other):
        return _t.matmul(self, other)

    def mm(self, mat2):
        """The product of two matrices (2-D only, as torch.mm; matmul broadcasts)."""
        _ranks("mm", (self, 2), (mat2, 2))
        return _t.matmul(self, mat2)

    def bmm(self, mat2):
        """Batched product of [b, n, m] and [b, m, p] (equal batches, as torch.bmm)."""
        _ranks("bmm", (self, 3), (mat2, 3))
        if self.shape[0] != mat2.shape[0]:
            raise ShapeError(f"bmm: batch sizes differ: {list(self.shape)} and {list(mat2.shape)}\n"
                             f"  at {user_location()}")
        return _t.matmul(self, mat2)

    def dot(self, other):
        """The inner product of two 1-D tensors of one length, as torch.dot."""
        _ranks("dot", (self, 1), (other, 1))
        return _t.matmul(self, other)

    def outer(self, vec2):
        """[n] x [m] -> [n, m]: self[i] * vec2[j], as torch.outer."""
        _ranks("outer", (self, 1), (vec2, 1))
        return self.unsqueeze(1) * vec2.unsqueeze(0)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """beta * self + alpha * (mat1 @ mat2), as torch.addmm (self broadcast to the product; with
        beta = 0 self is not read, so its NaN and inf do not propagate)."""
        _ranks("addmm", (mat1, 2), (mat2, 2))
        prod = _t.matmul(mat1, mat2)
        prod = prod * alpha if alpha != 1 else prod
        if beta == 0:
            return prod
        return (self * beta if beta != 1 else self) + prod

    def logsumexp(self, dim, keepdim: bool = False):
        """log(sum(exp(self))) over dim (an int or a tuple), computed stably, as torch.logsumexp."""
        from flame.frontend.functional import logsumexp

        axes = _t._axes(dim, self.ndim, "logsumexp")
        if len(axes) == 1:
            return logsumexp(self, axes[0], keepdim)
        rest = [a for a in range(self.ndim) if a not in axes]
        moved = self.permute(*rest, *axes).reshape(*[self.shape[a] for a in rest], -1)
        out = logsumexp(moved, -1)
        return out.reshape(*[1 if a in axes else self.shape[a] for a in range(self.ndim)]) if keepdim else out

    def log1p(self):
        """log(1 + self), accurate for small self (Kahan's correction: log(w) * self / (w - 1) with
        w = 1 + self rounded, which cancels w's rounding error), as torch.log1p."""
        from flame.frontend.ops import where

        x = self if self.dtype.is_float else self.to(f32)
        w = x + 1
        exact, inf = w == 1, w == float("inf")  # 1 + x rounds to 1: log1p(x) = x to within rounding
        safe = where(exact | inf, 2.0, w)  # keeps the unused branch finite (no 0/0 in either direction)
        return where(exact | inf, x, safe.log() * (x / (safe - 1)))

    def expm1(self):
        """exp(self) - 1, accurate for small self (Kahan's correction for |self| < 0.5: (u - 1) *
        self / log(u) with u = exp(self) rounded; beyond, u - 1 loses nothing), as torch.expm1."""
        from flame.frontend.ops import where

        x = self if self.dtype.is_float else self.to(f32)
        u = x.exp()
        near = x.abs() < 0.5
        exact = u == 1
        safe = where(near & ~exact, u, 2.0)  # the unused branch stays finite
        return where(exact, x, where(near, (safe - 1) * (x / safe.log()), u - 1))

    def trunc(self):
        """Rounded toward zero, as torch.trunc (integers as they are)."""
        if not self.dtype.is_float:
            return self
        from flame.frontend.ops import where

        return where(self < 0, self.ceil(), self.floor())

    fix = trunc

    def frac(self):
        """self - trunc(self): the fractional part with self's sign, as torch.frac."""
        return self - self.trunc()

    def log2(self):
        return self.log() * (1.0 / math.log(2.0))

    def log10(self):
        return self.log() * (1.0 / math.log(10.0))

    def sinh(self):
        """(exp(x) - exp(-x)) / 2 through expm1, so small x keep their relative accuracy."""
        return (self.expm1() - (-self).expm1()) * 0.5

    def cosh(self):
        return (self.exp() + (-self).exp()) * 0.5

    def tan(self):
        return self.sin() / self.cos()

    def xlogy(self, other):
        """self * log(other), 0 where self is 0 (unless other is NaN), as torch.xlogy."""
        from flame.frontend.ops import where

        other = _tensor(other, self)
        x = self if self.dtype.is_float else self.to(f32)
        log = other.log()
        # where self is 0 the value is 0 (even for other = 0) and the gradient log(other), as PyTorch's
        return where((x == 0) & ~other.isnan(), x * where(log.isfinite(), log, 0.0), x * log)

    def logit(self, eps: float | None = None):
        """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given, as torch.logit."""
        p = self.clamp(eps, 1 - eps) if eps is not None else self
        return (p / (1 - p)).log()

    def prod(self, dim: int | None = None, keepdim: bool = False, dtype=None):
        """The product over dim (every element when None), as torch.prod: the last running product of
        cumprod, so it differentiates as cumprod does (zeros included)."""
        x = self.to(dtype) if dtype is not None else (self.to(i64) if self.dtype == boolean else self)
        if dim is None:
            flat = x.reshape(-1)
            return flat.cumprod(0)[-1] if flat.shape[0] else _t.full((), 1, x.dtype)
        axis = _t.dim_index("prod", dim, x.ndim)
        if x.ndim == 0:
            return x
        out = x.cumprod(axis).narrow(axis, x.shape[axis] - 1, 1) if x.shape[axis] else \
            _t.full(tuple(1 if a == axis else n for a, n in enumerate(x.shape)), 1, x.dtype)
        return out if keepdim else out.squeeze(axis)

    def nansum(self, dim=None, keepdim: bool = False):
        """The sum with NaNs counted as zero, as torch.nansum."""
        from flame.frontend.ops import where

        return where(self.isnan(), 0.0, self).sum(dim, keepdim)

    def nanmean(self, dim=None, keepdim: bool = False):
        """The mean of the elements that are not NaN, as torch.nanmean."""
        count = (~self.isnan()).to(self.dtype).sum(dim, keepdim)
        return self.nansum(dim, keepdim) / count

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The diagonal of the (dim1, dim2) planes (above it for offset > 0, below for offset < 0) as
        the last dim, as torch.diagonal."""
        a, b = _t.dim_index("diagonal", dim1, self.ndim), _t.dim_index("diagonal", dim2, self.ndim)
        if a == b:
            raise ValueError(f"diagonal: dim1 and dim2 are both {dim1}")
        x = self.movedim((a, b), (-2, -1))
        rows, cols = x.shape[-2:]
        if offset >= 0:
            x, cols_left = x.narrow(-1, min(offset, cols), cols - min(offset, cols)), cols - min(offset, cols)
            n = min(rows, cols_left)
            x = x.narrow(-2, 0, n).narrow(-1, 0, n)
        else:
            start = min(-offset, rows)
            n = min(rows - start, cols)
            x = x.narrow(-2, start, n).narrow(-1, 0, n)
        if n == 0:
            return x.reshape(*x.shape[:-2], 0)
        return x.reshape(*x.shape[:-2], n * n)[..., :: n + 1]

    def diag(self, diagonal: int = 0):
        """A 1-D tensor's matrix with it on a diagonal, or a matrix's diagonal, as torch.diag."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ShapeError(f"diag: expects a 1-D or 2-D tensor, got {list(self.shape)}\n  at {user_location()}")
        from flame.frontend.creation import eye

        n, k = self.shape[0], abs(diagonal)
        square = eye(n, dtype=self.dtype) * self.unsqueeze(0) if self.dtype != boolean else \
            eye(n, dtype=boolean) & self.unsqueeze(0)
        if not k:
            return square
        from flame.frontend.ops import pad

        return pad(square, ((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k)))

    def trace(self):
        """The sum of a matrix's diagonal, as torch.trace."""
        _ranks("trace", (self, 2))
        return self.diagonal().sum()

    def take_along_dim(self, indices, dim: int | None = None):
        """self's elements at indices along dim (of the flattened tensor when dim is None), self and
        indices broadcast except along dim, as torch.take_along_dim."""
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        axis = _t.dim_index("take_along_dim", dim, self.ndim)
        shape = [max(a, b) for a, b in zip(self.shape, indices.shape)]
        src = self.broadcast_to(*[n if i != axis else self.shape[axis] for i, n in enumerate(shape)])
        idx = indices.broadcast_to(*[n if i != axis else indices.shape[axis] for i, n in enumerate(shape)])
        return src.gather(axis, idx)

    def index_add(self, dim: int, index, source, *, alpha=1):
        """self with alpha * source's slices added at index along dim (repeated indices add up), as
        torch.index_add."""
        axis = _t.dim_index("index_add", dim, self.ndim)
        if index.ndim != 1 or source.shape[axis] != index.shape[0]:
            raise ShapeError(f"index_add: index {list(index.shape)} must be 1-D with one entry per slice of "
                             f"source {list(source.shape)} along dim {dim}\n  at {user_location()}")
        shape = [1] * source.ndim
        shape[axis] = index.shape[0]
        idx = index.reshape(*shape).broadcast_to(*source.shape)
        return self.scatter_add(axis, idx, source * alpha if alpha != 1 else source)

    def masked_select(self, mask):
        """The elements where mask (broadcast with self) is True, as a 1-D tensor: eager only, as
        x[mask] (its length depends on the values)."""
        from flame.frontend.ops import broadcast_tensors

        x, m = broadcast_tensors(self, mask)
        return x[m]

    def unflatten(self, dim: int, sizes):
        """Dimension dim split into sizes (one may be -1), as torch.unflatten."""
        axis = _t.dim_index("unflatten", dim, self.ndim)
        return self.reshape(*self.shape[:axis], *sizes, *self.shape[axis + 1:])

    def ravel(self):
        return self.reshape(-1)

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None):
        from flame.nn import init

        return init.uniform_(self, a, b, generator)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        from flame.nn import init

        return init.normal_(self, mean, std, generator)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """beta * self + alpha * (batch1 @ batch2) over a batch, as torch.baddbmm."""
        prod = self.__class__.bmm(batch1, batch2)
        prod = prod * alpha if alpha != 1 else prod
        if beta == 0:
            return prod
        return (self * beta if beta != 1 else self) + prod

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        """(values, indices) of the k-th smallest element along dim (k from 1), as torch.kthvalue."""
        axis = _t.dim_index("kthvalue", dim, self.ndim)
        x = self if self.ndim else self.reshape(1)
        n = x.shape[axis]
        if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
            raise ShapeError(f"kthvalue: k={k!r} is out of range for dimension {dim} of size {n} (expected 1 <= k <= "
                             f"{n})\n  at {user_location()}")
        idx = x.argsort(axis).narrow(axis, int(k) - 1, 1)
        values, indices = x.gather(axis, idx), idx
        if not keepdim or self.ndim == 0:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return KthvalueResult(values, indices)

    def median(self, dim: int | None = None, keepdim: bool = False):
        """The lower median (the ((n + 1) // 2)-th smallest): of every element when dim is None, else
        (values, indices) along dim, as torch.median."""
        if dim is None:
            flat = self.reshape(-1)
            return flat.kthvalue((flat.shape[0] + 1) // 2, 0).values
        axis = _t.dim_index("median", dim, self.ndim)
        n = self.shape[axis] if self.ndim else 1
        r = self.kthvalue((n + 1) // 2, axis, keepdim)
        return MedianResult(r.values, r.indices)

    def tensordot(self, other, dims=2):
        """The sum over dims pairs of self's and other's axes (an int: self's last and other's first
        dims), as torch.tensordot."""
        if isinstance(dims, int):
            a_axes, b_axes = list(range(self.ndim - dims, self.ndim)), list(range(dims))
        else:
            a_axes, b_axes = [list(d) if not isinstance(d, int) else [d] for d in dims]
        a_axes = [_t.dim_index("tensordot", d, self.ndim) for d in a_axes]
        b_axes = [_t.dim_index("tensordot", d, other.ndim) for d in b_axes]
        if [self.shape[i] for i in a_axes] != [other.shape[j] for j in b_axes]:
            raise ShapeError(f"tensordot: contracted dims differ: {[self.shape[i] for i in a_axes]} and "
                             f"{[other.shape[j] for j in b_axes]}\n  at {user_location()}")
        a_free = [i for i in range(self.ndim) if i not in a_axes]
        b_free = [j for j in range(other.ndim) if j not in b_axes]
        k = math.prod(self.shape[i] for i in a_axes)
        a = self.permute(*a_free, *a_axes).reshape(-1, k)
        b = other.permute(*b_axes, *b_free).reshape(k, -1)
        return _t.matmul(a, b).reshape(*[self.shape[i] for i in a_free], *[other.shape[j] for j in b_free])

    def kron(self, other):
        """The Kronecker product, as torch.kron (ranks padded with leading 1s)."""
        rank = max(self.ndim, other.ndim)
        a = self.reshape(*([1] * (rank - self.ndim)), *self.shape)
        b = other.reshape(*([1] * (rank - other.ndim)), *other.shape)
        inter = [v for pair in zip(a.shape, [1] * rank) for v in pair]
        outer = [v for pair in zip([1] * rank, b.shape) for v in pair]
        prod = a.reshape(*inter) * b.reshape(*outer)
        return prod.reshape(*[x * y for x, y in zip(a.shape, b.shape)])

    def cross(self, other, dim: int | None = None):
        """The cross product of 3-vectors along dim (the first dim of size 3 when None, as torch.cross)."""
        if dim is None:
            dim = next((i for i, n in enumerate(self.shape) if n == 3), None)
            if dim is None:
                raise ShapeError(f"cross: no dimension of size 3 in {list(self.shape)}\n  at {user_location()}")
        axis = _t.dim_index("cross", dim, self.ndim)
        if self.shape[axis] != 3 or other.shape[axis] != 3:
            raise ShapeError(f"cross: dimension {dim} must have size 3, got {list(self.shape)} and "
                             f"{list(other.shape)}\n  at {user_location()}")
        return self.roll(-1, axis) * other.roll(-2, axis) - self.roll(-2, axis) * other.roll(-1, axis)

    def cov(self, *, correction: int = 1, fweights=None, aweights=None):
        """The covariance of the rows (variables) over the columns (observations), as torch.cov
        (frequency and analytic weights are not supported)."""
        if fweights is not None or aweights is not None:
            raise NotImplementedError("cov: fweights and aweights are not supported")
        if self.ndim > 2:
            raise ShapeError(f"cov: expects a 1-D or 2-D tensor, got {list(self.shape)}\n  at {user_location()}")
        x = self.reshape(1, -1) if self.ndim < 2 else self
        x = x if x.dtype.is_float else x.to(f32)
        centered = x - x.mean(1, keepdim=True)
        out = _t.matmul(centered, centered.transpose(0, 1)) / (x.shape[1] - correction)
        return out.reshape(()) if self.ndim < 2 else out

    def corrcoef(self):
        """Pearson's correlation coefficients of the rows, clipped to [-1, 1], as torch.corrcoef."""
        c = self.cov()
        if c.ndim == 0:
            return c / c
        d = c.diagonal().sqrt()
        return (c / d.unsqueeze(1) / d.unsqueeze(0)).clamp(-1.0, 1.0)

    # ---- interpolation and fused products (optimizer and EMA code) ------------------------------------
    def lerp(self, end, weight):
        """self + weight * (end - self), as torch.lerp, in PyTorch's two-sided form (from end when
        weight >= 0.5), so weight 1 gives end exactly."""
        diff = end - self
        if isinstance(weight, _t.Tensor):
            from flame.frontend.ops import where

            return where(weight.abs() < 0.5, self + weight * diff, end - diff * (1 - weight))
        return self + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)

    def lerp_(self, end, weight):
        return self.copy_(self.lerp(end, weight))

    def addcmul(self, tensor1, tensor2, *, value=1):
        """self + value * tensor1 * tensor2, as torch.addcmul."""
        prod = tensor1 * tensor2
        return self + (prod * value if value != 1 else prod)

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return self.copy_(self.addcmul(tensor1, tensor2, value=value))

    def addcdiv(self, tensor1, tensor2, *, value=1):
        """self + value * tensor1 / tensor2, as torch.addcdiv."""
        quot = tensor1 / tensor2
        return self + (quot * value if value != 1 else quot)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return self.copy_(self.addcdiv(tensor1, tensor2, value=value))

    # ---- picking along a dim, rolling, moving dims -----------------------------------------------------
    def select(self, dim: int, index: int):
        """The slice at index along dim, that dim removed, as torch.select."""
        axis = _t.dim_index("select", dim, self.ndim)
        n = self.shape[axis]
        if not -n <= index < n:
            raise IndexError(f"select: index {index} is out of range for dimension {dim} of size {n}\n"
                             f"  at {user_location()}")
        return self.narrow(axis, index % n, 1).squeeze(axis)

    def unbind(self, dim: int = 0):
        """Every slice along dim, that dim removed, as a tuple (torch.unbind)."""
        axis = _t.dim_index("unbind", dim, self.ndim)
        return tuple(self.select(axis, i) for i in range(self.shape[axis]))

    def roll(self, shifts, dims=None):
        """Elements shifted along dims (of the flattened tensor when dims is None), those falling off
        one end coming back at the other, as torch.roll."""
        if dims is None:
            if not isinstance(shifts, int):
                raise ValueError("roll: without dims, shifts must be one int (the flattened tensor's shift)")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
        out = self
        for shift, dim in zip(shifts, dims):
            axis = _t.dim_index("roll", dim, self.ndim)
            n = self.shape[axis]
            k = shift % n if n else 0
            if k:
                from flame.frontend.ops import cat

                out = cat([out.narrow(axis, n - k, k), out.narrow(axis, 0, n - k)], axis)
        return out

    def movedim(self, source, destination):
        """Dims moved from source to destination (ints or sequences), the others in order, as torch.movedim."""
        src = (source,) if isinstance(source, int) else tuple(source)
        dst = (destination,) if isinstance(destination, int) else tuple(destination)
        if len(src) != len(dst):
            raise ValueError(f"movedim: {len(src)} source dims for {len(dst)} destinations")
        src = [_t.dim_index("movedim", d, self.ndim) for d in src]
        dst = [_t.dim_index("movedim", d, self.ndim) for d in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ValueError(f"movedim: repeated dims in {source} or {destination}")
        order: list = [None] * self.ndim
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(a for a in range(self.ndim) if a not in src)
        return self.permute(*[a if a is not None else next(rest) for a in order])

    def swapaxes(self, axis0: int, axis1: int):
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    def t(self):
        """The transpose of a matrix (a 0-d or 1-D tensor as it is), as torch.t."""
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor of at most 2 dimensions, got {list(self.shape)} (use "
                             f"transpose or mT)\n  at {user_location()}")
        return self.transpose(0, 1) if self.ndim == 2 else self

    def is_floating_point(self) -> bool:
        return self.dtype.is_float

    # ---- new tensors like this one --------------------------------------------------------------------
    def new_full(self, size, fill_value, dtype=None):
        return _t.full(_t._shape_arg((size,) if isinstance(size, int) else tuple(size)), fill_value,
                       dtype_of(dtype) if dtype is not None else self.dtype)

    def new_zeros(self, *size, dtype=None):
        return self.new_full(_t._shape_arg(size), 0, dtype)

    def new_ones(self, *size, dtype=None):
        return self.new_full(_t._shape_arg(size), 1, dtype)

    def new_empty(self, *size, dtype=None):
        """Like new_zeros: flame has no uninitialised memory to hand out."""
        return self.new_zeros(*size, dtype=dtype)

    def new_tensor(self, data, dtype=None):
        return _t.Tensor(data, dtype if dtype is not None else self.dtype)

    def contiguous(self, memory_format=None):
        """self: every flame tensor is contiguous (row-major, no strided views)."""
        return self

    def is_contiguous(self, memory_format=None) -> bool:
        return True

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nelement(self) -> int:
        return math.prod(self.shape)
