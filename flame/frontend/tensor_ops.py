"""Tensor methods beyond the core of tensor.py, with PyTorch's names and semantics, each composed from
IR ops: sorting and selection (sort, argsort, topk, narrow), scans (cumsum, cumprod), tests (any, all,
isnan, isinf, isfinite), splitting and tiling (split, chunk, repeat, tile, repeat_interleave), norms,
floor division and remainder, clamp, masked_fill; PyTorch's other spellings (add ... div with
rounding_mode, eq ... ge, logical_and/or, where), masked_select, picking, rolling and moving dims;
the new_* constructors; the gather/scatter family's methods (take_along_dim, index_add/copy/fill,
scatter, index_put: index_ops.py). Arithmetic and statistics (products, log1p/expm1 and kin, order
statistics, lerp/addcmul/addcdiv) are in tensor_math.py. Tensor inherits both; flame.frontend.ops
makes the function forms."""

from __future__ import annotations

import math
from collections import namedtuple
from contextlib import nullcontext

import numpy as np

from flame.errors import DTypeError, ShapeError, TraceError
from flame.frontend import data_dependent, legacy_types, more_math, opmath, pointwise_formulas, views
from flame.frontend import memory_format as _memory_format
from flame.frontend.autocast import policy
from flame.frontend.broadcasting import broadcast_tensors
from flame.frontend.context import current_trace, grad_enabled, made_like, no_grad, user_location
from flame.frontend.counted_writes import note_result
from flame.frontend.creation import arange, normal_, uniform_
from flame.frontend.dispatch import apply, broadcast
from flame.frontend.indexing import assign, flat_positions, shares_counter, stand_in, writes_a_leaf
from flame.frontend.linalg_functions import matrix_norm
from flame.frontend.norms import vector_norm
from flame.frontend.promotion import alpha_check, fits, is_bool, result_type
from flame.frontend.tensor import Tensor, _shape_arg, dim_index, int_arg
from flame.frontend.tensor_core import binary, cat, full, placed, where
from flame.frontend.torch_saves import saves
from flame.ir.dtypes import bf16, boolean, dtype_of, f16, f32, i64, u8

SortResult = namedtuple("sort", ["values", "indices"])
TopkResult = namedtuple("topk", ["values", "indices"])


def _kind(dtype) -> int:
    """bool < integer < floating: the order in which an in-place result may not widen (torch's can_cast)."""
    return 2 if dtype.is_float else 0 if dtype == boolean else 1


def _is_number(x) -> bool:
    return isinstance(x, (int, float, bool, np.number, np.bool_))


def _bool(x):
    return x if x.dtype == boolean else x != 0



def _check_alpha(name: str, a, b, alpha) -> None:
    """PyTorch's rule: a float alpha with integer (or bool) operands, or a bool alpha with other than bool
    ones, raises rather than promoting."""
    alpha_check(name, "alpha", alpha, result_type(a, b))


def _tensor(x):
    """x as a Tensor (a Python number as a 0-d tensor of its own type, as PyTorch promotes it)."""
    return x if isinstance(x, Tensor) else Tensor(np.asarray(x))



CumResult = {n: namedtuple(n, ["values", "indices"]) for n in ("cummax", "cummin")}

def _copied(t: Tensor, src: Tensor, old: Tensor) -> Tensor:
    """What y.copy_(src) makes y hold: a value (and node) of its own, so that a later write into y is none
    into src; where y requires grad, one of src and of y's old history (`old`, the write's stand-in; while
    tracing y itself), which takes a zero gradient, as torch's copy_ node gives it (its nodes still run:
    one that saved y raises)."""
    if current_trace.get() is None and not src.requires_grad:
        return src  # (no history to share)
    return where(full((), True, boolean), src, old) if t.requires_grad else src.clone()


class TensorOps:
    """The mixin Tensor inherits (no state of its own)."""

    __slots__ = ()

    # ---- sorting and selection ----------------------------------------------------------------------
    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """Indices that sort along dim. Always stable (equal elements keep their order); NaN sorts as
        larger than any number, as in PyTorch."""
        axis = dim_index("argsort", dim, self.ndim)
        return apply("argsort", self, axis=axis, descending=bool(descending))

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """(values, indices) sorted along dim (stable; values differentiable through the gather)."""
        idx = self.argsort(dim, descending)
        if self.ndim == 0:
            return SortResult(self.clone(), idx)  # a new tensor, as torch's
        return SortResult(self.gather(dim, idx), idx)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
        """(values, indices) of the k largest (or smallest) elements along dim, in sorted order; ties
        keep the lower index first."""
        axis, k = dim_index("topk", dim, self.ndim), int_arg(k)
        x = self if self.ndim else self.reshape(1)
        n = x.shape[axis]
        if not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
            raise ShapeError(f"topk: k={k!r} is out of range for dimension {dim} of size {n} (expected 0 <= k <= {n})"
                             f"\n  at {user_location()}")
        # a 0-d tensor's topk is the tensor itself for k 0 or 1, as torch's
        idx = apply("argsort", x, axis=axis, descending=bool(largest)).narrow(axis, 0, int(k) if self.ndim else 1)
        vals = x.gather(axis, idx)
        if self.ndim == 0:
            return TopkResult(vals.reshape(()), idx.reshape(()))
        return TopkResult(vals, idx)

    def view_as(self, other):
        """self.view(other.shape), as torch's."""
        return self.view(other.shape)

    def reshape_as(self, other):
        """self.reshape(other.shape), as torch's."""
        return self.reshape(other.shape)

    def narrow(self, dim: int, start: int, length: int):
        """Elements start .. start+length-1 along dim (a slice)."""
        axis = dim_index("narrow", dim, self.ndim)
        if self.ndim == 0:
            raise ShapeError(f"narrow() cannot be applied to a 0-dim tensor, as in PyTorch\n  at {user_location()}")
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
        return apply(name, x, axis=dim_index(name, dim, self.ndim))

    # autocast: on PyTorch's CUDA float32 list (not with an explicit dtype); on none of its CPU lists
    @policy("f32", cpu="")
    def cumsum(self, dim: int, dtype=None):
        """Running sum along dim (integers and bool accumulate in int64, as in PyTorch)."""
        return self._scan("cumsum", dim, dtype)

    # autocast: on PyTorch's CUDA float32 list (not with an explicit dtype); on none of its CPU lists
    @policy("f32", cpu="")
    def cumprod(self, dim: int, dtype=None):
        """Running product along dim; its gradient is exact where the input has zeros."""
        return self._scan("cumprod", dim, dtype)

    def cummax(self, dim: int):
        """(values, indices) of the running maximum along dim, as torch.cummax: the latest index of equal
        maxima, a NaN taking over; the gradient goes to the element each value came from."""
        return self._cum_extreme("cummax", True, dim)

    def cummin(self, dim: int):
        """(values, indices) of the running minimum along dim, as torch.cummin (cummax's rules)."""
        return self._cum_extreme("cummin", False, dim)

    def _cum_extreme(self, name: str, largest: bool, dim: int):
        axis = dim_index(name, dim, self.ndim)
        idx = apply("cumarg", self, axis=axis, largest=largest)
        values = self.gather(axis, idx) if self.ndim else self.clone()  # a new tensor, as torch's
        return CumResult[name](values, idx)

    def logcumsumexp(self, dim: int):
        """log(cumsum(exp(self))) along dim without overflow, as torch.logcumsumexp (floating dtypes;
        f16 / bf16 accumulate in f32); its gradient torch's."""
        if not self.dtype.is_float:
            raise DTypeError(f'logcumsumexp: "logcumsumexp" is not implemented for {self.dtype.name} tensors (as in '
                             f"PyTorch)\n  at {user_location()}")
        return apply("logcumsumexp", self, axis=dim_index("logcumsumexp", dim, self.ndim))

    # ---- tests --------------------------------------------------------------------------------------------
    def _truth(self):
        return self if self.dtype == boolean else self != 0

    def any(self, dim=None, keepdim: bool = False):
        """True where some element (along dim) is nonzero (uint8 in, uint8 out, as torch; dim=() reduces
        nothing)."""
        if isinstance(dim, (tuple, list)) and not dim:
            out = self._truth()
        else:
            out = self._truth().sum(dim, keepdim=keepdim) > 0
        return out.to(u8) if self.dtype == u8 else out

    def all(self, dim=None, keepdim: bool = False):
        """True where every element (along dim) is nonzero (also over zero elements)."""
        if isinstance(dim, (tuple, list)) and not dim:
            out = self._truth()
        else:
            out = (~self._truth()).sum(dim, keepdim=keepdim) == 0
        return out.to(u8) if self.dtype == u8 else out

    def isnan(self):
        return self != self if self.dtype.is_float else full(self.shape, False, boolean)

    def isinf(self):
        return self.abs() == float("inf") if self.dtype.is_float else full(self.shape, False, boolean)

    def isfinite(self):
        return self.abs() < float("inf") if self.dtype.is_float else full(self.shape, True, boolean)

    # ---- tiling ---------------------------------------------------------------------------------------
    @views.new_tensor
    def repeat(self, *sizes):
        """Tile the tensor sizes[i] times along dim i (leading extra sizes add new dims)."""
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} repeat sizes for a tensor of {self.ndim} dimensions (need at least "
                             f"one per dimension)\n  at {user_location()}")
        if any(s < 0 for s in sizes):
            raise ShapeError(f"repeat: sizes {list(sizes)} must be non-negative\n  at {user_location()}")
        shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        x = self.reshape(*[d for s in shape for d in (1, s)])
        x = x.broadcast_to([d for r, s in zip(sizes, shape) for d in (r, s)])
        return x.reshape(*[r * s for r, s in zip(sizes, shape)])

    @views.new_tensor
    def tile(self, *dims):
        """repeat(), with missing leading sizes taken as 1 (torch.tile)."""
        dims = _shape_arg(dims)
        return self.repeat(*((1,) * (self.ndim - len(dims)) + tuple(dims)))

    @views.new_tensor
    def repeat_interleave(self, repeats=None, dim: int | None = None, output_size: int | None = None):
        """Repeat each element (each slice along dim) repeats times; repeats is an int or one count per
        element. Inside @flame.compile a tensor of counts needs output_size (the result's length).
        Without repeats (torch.repeat_interleave(counts)), self holds the counts of 0, 1, 2 ..."""
        if repeats is None:
            if self.ndim != 1 or self.dtype.is_float or self.dtype == boolean:
                raise ShapeError(f"repeat_interleave only accepts a 1-D integer tensor of repeats, got "
                                 f"{self.dtype}{list(self.shape)}, as in PyTorch\n  at {user_location()}")
            return arange(self.shape[0], dtype=self.dtype).repeat_interleave(self, 0, output_size)
        x, axis = (self.reshape(-1), 0) if dim is None else (self, dim_index("repeat_interleave", dim, self.ndim))
        if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats._value is None:
            repeats = int(repeats.item())
        if isinstance(repeats, (int, np.integer)):
            r = int(repeats)
            y = x.unsqueeze(axis + 1)
            y = y.broadcast_to(*y.shape[:axis + 1], r, *y.shape[axis + 2:])
            return y.reshape(*x.shape[:axis], x.shape[axis] * r, *x.shape[axis + 1:])
        repeats = repeats if isinstance(repeats, Tensor) else Tensor(np.asarray(repeats, np.int64))
        if repeats.shape != (x.shape[axis],):
            raise ShapeError(f"repeat_interleave: repeats {list(repeats.shape)} must have one count per element of "
                             f"dimension {axis} ({x.shape[axis]})\n  at {user_location()}")
        if repeats._value is None and bool((repeats.numpy() < 0).any()):
            raise ShapeError(f"repeat_interleave: repeats can not be negative\n  at {user_location()}")
        if output_size is None:
            if repeats._value is not None:
                raise TraceError("repeat_interleave with a tensor of repeats inside @flame.compile needs "
                                 f"output_size= (the result's length depends on the counts)\n  at {user_location()}")
            output_size = int(repeats.sum().item())
        ends = repeats.to(i64).cumsum(0)  # position j comes from the element whose range holds it
        src = (ends.unsqueeze(0) <= arange(int(output_size)).unsqueeze(1)).sum(1)
        return apply("index_select", x, src, axis=axis)

    # ---- norms --------------------------------------------------------------------------------------------
    def norm(self, p="fro", dim=None, keepdim: bool = False, *, dtype=None):
        """torch.norm: as torch's, linalg.vector_norm for a number p (None: 2) and for 'fro' over at most two
        dims (all by default), else linalg.matrix_norm over dim (all dims by default: 'nuc' of a matrix,
        and torch's errors for other ranks and orders). The gradient of the 2-norm at zero is zero, as in
        PyTorch."""
        dims = [dim] if isinstance(dim, int) else dim
        if not isinstance(p, str):
            return vector_norm(self, 2.0 if p is None else p, dims, keepdim, dtype=dtype)
        if p == "fro" and (dim is None or isinstance(dim, int) or len(dim) <= 2):
            return vector_norm(self, 2, dims, keepdim, dtype=dtype)
        return matrix_norm(self, p, list(range(self.ndim)) if dims is None else dims, keepdim, dtype=dtype)

    # ---- floor division and remainder -------------------------------------------------------------------
    def __floordiv__(self, o):
        return binary("floor_divide", self, o)

    def __rfloordiv__(self, o):
        return binary("floor_divide", o, self)

    def __mod__(self, o):
        return binary("remainder", self, o)

    def __rmod__(self, o):
        return binary("remainder", o, self)

    def floor_divide(self, other):
        """Quotient rounded toward -inf (Python's //)."""
        return binary("floor_divide", self, other)

    def remainder(self, other):
        """Python's %: self - floor(self / other) * other, with the sign of other."""
        return binary("remainder", self, other)

    def fmod(self, other):
        """C's fmod, as torch.fmod: self - trunc(self / other) * other, with the sign of self (integers and
        floats; broadcasting and promotion as `%`). Its gradient is 1 for self and -trunc(self / other) for
        other. An integer zero divisor raises ZeroDivisorError on the reference executor (PyTorch's CPU
        raises); on the GPU its result is unspecified, as in PyTorch's CUDA."""
        return binary("fmod", self, other)

    # ---- clamp and masked_fill --------------------------------------------------------------------------
    def clamp(self, min=None, max=None):  # noqa: A002
        """Elementwise min(max(x, min), max), as torch.clamp (more_math.clamp)."""
        return more_math.clamp(self, min, max)

    clip = clamp

    # torch's ClampMinBackward0 / ClampMinBackward1 (a tensor bound, saved too), and ClampMax's
    @saves("self", "min", name="clamp_min", vjp=pointwise_formulas.clamp)
    def clamp_min(self, min):  # noqa: A002
        return self.clamp(min=min)

    @saves("self", "max", name="clamp_max", vjp=pointwise_formulas.clamp)
    def clamp_max(self, max):  # noqa: A002
        return self.clamp(max=max)

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self._inplace(lambda x: x.clamp(min, max), min, max, what="clamp_")

    clip_ = clamp_

    def masked_fill(self, mask, value):
        """value where mask is True, self elsewhere, in their broadcast shape (a mask of more dims gives a
        larger result, as torch's; masked_fill_ keeps self's shape)."""
        if not isinstance(mask, Tensor) or mask.dtype != boolean:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise DTypeError(f"masked_fill: the mask must be a bool tensor, got {got}\n  at {user_location()}")
        broadcast("masked_fill", [mask._type(), self._type()])  # (torch's error where they do not)
        fits("masked_fill", "value", value, self.dtype)
        if isinstance(value, Tensor):
            if value.ndim:
                raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got shape {list(value.shape)}"
                                 f"\n  at {user_location()}")
            value = value.to(self.dtype)
        else:
            value = full((), value, self.dtype)
        return apply("where", mask, value, self)

    def masked_fill_(self, mask, value):
        if views.overlapping(self):
            # an expanded view, as torch writes it: value at the chosen elements and nothing elsewhere, so
            # the base's locations some chosen element shares take the value and the others keep theirs
            views.check_writable(self, "masked_fill_", not (self.requires_grad and grad_enabled.get()))
            base = self._base
            chosen = mask.broadcast_to(self.shape).to(f32).reshape(-1)
            hit = apply("scatter_add", full((base.numel(),), 0.0, f32), flat_positions(self),
                        chosen, axis=0) > 0
            # through detach(): the base takes the values and keeps its own history, as torch's
            detached = any(opdef.view is None for opdef, _, _ in self._chain)
            with no_grad() if detached and not getattr(value, "requires_grad", False) else nullcontext():
                assign(base, where(hit.reshape(base.shape), value, base), "masked_fill_", fill=True)
            return self
        return self._inplace(lambda x: x.masked_fill(mask, value), value, check=None)  # torch reads value first

    def _inplace(self, fn, *others, fill: bool = False, check: str | None = "partial", what: str = "in-place op"):
        """Make self hold fn(self) (an in-place op, torch's rules): the result keeps self's shape and
        dtype, and may not need a wider kind of dtype (a float result into an integer tensor). fill: the
        op writes one number (masked_fill_ of a number), as indexing.assign's. check: refuse an input of
        `others` sharing part ("partial") or any ("any") of self's memory, as torch's op `what` does."""
        if check is not None:
            views.check_overlap(self, others, what, full=check == "any")
        old = stand_in(self, *others)
        if old is self and current_trace.get() is not None and grad_enabled.get() \
                and any(shares_counter(o, self) for o in others):
            # y.copysign_(y): torch's node saves the self it reads as a clone (its original_self) and an
            # operand as it is, which the write changes; while tracing the clone's value is the self the
            # write's ops read, which counted_writes does not count (eagerly, the stand-in is)
            old = self.clone()
        new = fn(old)
        if new.shape != self.shape:
            raise ShapeError(f"in-place op: output with shape {list(self.shape)} doesn't match the broadcast "
                             f"shape {list(new.shape)}\n  at {user_location()}")
        if new.dtype != self.dtype and _kind(new.dtype) > _kind(self.dtype):
            raise DTypeError(f"in-place op: result type {new.dtype} can't be cast to the desired output type "
                             f"{self.dtype}\n  at {user_location()}")
        assign(self, new if new.dtype == self.dtype else new.to(self.dtype), what, fill=fill)
        if self._base is not None and grad_enabled.get():
            note_result(self, new)  # what torch's node of the op saved as its result, where it did
        return self

    # ---- in-place updates (pure IR: a rebinding while tracing, a buffer write when eager) ---------
    def copy_(self, other: Tensor | float, non_blocking: bool = False) -> Tensor:
        """self's elements set to other's (broadcast, converted to self's dtype), as torch's copy_
        (non_blocking changes nothing: flame's copies are ordered on the executor's stream). A tensor copied
        onto its own memory (the same elements, shape and strides: an expanded view onto itself) is left as
        it is, as torch's copy_ leaves it, with no check; but where the copy records a gradient (self
        requires grad) into an expanded view, torch's backward refuses it as an overlapping write, and flame
        refuses it at the write, as it refuses a recorded fill of one (indexing.assign)."""
        if views.same_data(self, other) and not writes_a_leaf(self):  # (torch's leaf check comes first)
            if grad_enabled.get() and self.requires_grad and views.overlapping(self):
                raise views.overlap_error("copy_")
            return self
        views.check_overlap(self, (other,), "copy_")
        return self._copy(other)

    def _copy(self, src: Tensor | float) -> Tensor:
        fill = not isinstance(src, Tensor)  # fill_ and zero_: one number, allowed into an expanded view
        self_src = src
        src = src if isinstance(src, Tensor) else full(self.shape, src, self.dtype)
        if src._dtype is not self._dtype and src.dtype != self.dtype:
            src = src.to(self.dtype)
        if src.shape != self.shape:
            src = src.broadcast_to(self.shape)
        old = stand_in(self, src)
        if src is self_src and grad_enabled.get() and src.shape == self.shape:
            src = _copied(self, src, old)
        assign(self, src, "copy_", fill)
        return self

    def zero_(self) -> Tensor:
        return self.copy_(0)

    def fill_(self, value) -> Tensor:
        if isinstance(value, Tensor) and value.ndim:  # torch's fill_ takes a number or a 0-d tensor only
            raise ShapeError(f"fill_: the value must be a 0-d tensor, got {list(value.shape)}\n  at {user_location()}")
        return self._copy(value)  # a 0-d tensor value is read before the write, as torch's fill_

    def add_(self, other, alpha=1) -> Tensor:
        return self._inplace(lambda x: x.add(other, alpha=alpha), other, what="add_")

    def sub_(self, other, alpha=1) -> Tensor:
        return self._inplace(lambda x: x.sub(other, alpha=alpha), other, what="sub_")

    def mul_(self, other) -> Tensor:
        return self._inplace(lambda x: x * other, other, what="mul_")

    # x += y and its kin update x itself, as in PyTorch: the same object keeps its identity,
    # requires_grad and .grad (a Parameter stays the module's parameter). See _inplace above.
    def __iadd__(self, o):
        return self._inplace(lambda x: x + o, o, what="+=")

    def __isub__(self, o):
        return self._inplace(lambda x: x - o, o, what="-=")

    def __imul__(self, o):
        return self._inplace(lambda x: x * o, o, what="*=")

    def __itruediv__(self, o):
        return self._inplace(lambda x: x / o, o, what="/=")

    def __ifloordiv__(self, o):
        return self._inplace(lambda x: x // o, o, what="//=")

    def __imod__(self, o):
        return self._inplace(lambda x: x % o, o, what="%=")

    def __ipow__(self, o):
        return self._inplace(lambda x: x**o, o, what="**=")

    def __iand__(self, o):
        return self._inplace(lambda x: x & o, o, what="&=")

    def __ior__(self, o):
        return self._inplace(lambda x: x | o, o, what="|=")

    def __ixor__(self, o):
        return self._inplace(lambda x: x ^ o, o, what="^=")

    def __ilshift__(self, o):
        return self._inplace(lambda x: x << o, o, what="<<=")

    def __irshift__(self, o):
        return self._inplace(lambda x: x >> o, o, what=">>=")

    def __imatmul__(self, o):
        raise TypeError("In-place matrix multiplication is not supported: write `a = a @ b` instead of "
                        f"`a @= b` (as in PyTorch)\n  at {user_location()}")

    # ---- PyTorch's other spellings: arithmetic and comparisons --------------------------------------
    def add(self, other, *, alpha=1):
        """self + alpha * other, as torch.add (f16/bf16: in f32, rounded once, as torch's kernel)."""
        _check_alpha("add", self, other, alpha)
        if opmath.is_one(alpha):
            return self + other
        return opmath.with_alpha(lambda x, y, a: x + y * a, self, other, alpha)

    def sub(self, other, *, alpha=1):
        """self - alpha * other, as torch.sub (f16/bf16: in f32, rounded once, as torch's kernel)."""
        _check_alpha("sub", self, other, alpha)
        if opmath.is_one(alpha) or is_bool(self) or is_bool(other):  # a bool operand raises there, as torch's
            return self - other
        return opmath.with_alpha(lambda x, y, a: x - y * a, self, other, alpha)

    def mul(self, other):
        return self * other

    def div(self, other, *, rounding_mode: str | None = None):
        """self / other, as torch.div: true division (integers give the default floating
        dtype), or rounded toward zero
        (rounding_mode="trunc") or down ("floor"), which keep an integer dtype."""
        if rounding_mode is None:
            return self / other
        if rounding_mode not in ("trunc", "floor"):
            raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        value = self // other if rounding_mode == "floor" else self._div_trunc(other)
        operands = [t for t in (self, other) if isinstance(t, Tensor) and t.dtype.is_float]
        if not value.dtype.is_float or not any(opmath.wants_gradient(t) for t in operands):
            return value
        # PyTorch's gradient of a rounded quotient: zeros to both operands (floor's zero gradient, which
        # no NaN or infinite operand turns into NaN), on a result that requires grad
        zero = sum((t.floor() for t in operands[1:]), operands[0].floor())
        return apply("straight_through", zero.to(value.dtype), value.detach())

    def _div_trunc(self, other):
        """self / other rounded toward zero, as torch.div(rounding_mode="trunc")."""
        floor = self // other
        if floor.dtype in (f16, bf16) and not isinstance(other, Tensor):  # torch: trunc of the f32 quotient
            return (self.to(floor.dtype).float() / float(np.float32(other))).trunc().to(floor.dtype)
        if floor.dtype.is_float:  # torch: trunc(a / b) of the rounded quotient (1.0 / 0.1 is 10, not 9)
            return (self / other).trunc().to(floor.dtype)
        if floor.dtype == u8:  # both sides unsigned (a negative Python divisor wraps, as torch's): no sign
            return floor
        # integers: floor division rounds down; toward zero differs when the remainder is nonzero and
        # the signs differ
        rest = self.to(floor.dtype) - floor * other  # (a bool dividend counts as 0 / 1)
        return where((rest != 0) & ((self < 0) != (_tensor(other) < 0)), floor + 1, floor)

    def true_divide(self, other):
        return self / other

    def div_(self, other, *, rounding_mode: str | None = None):
        return self._inplace(lambda x: x.div(other, rounding_mode=rounding_mode), other, what="div_")

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
        return _bool(self) & _bool(_tensor(other))

    def logical_or(self, other):
        """Either nonzero, as torch.logical_or (any dtypes; a bool result)."""
        return _bool(self) | _bool(_tensor(other))

    def logical_xor(self, other):
        """Exactly one nonzero, as torch.logical_xor (any dtypes; a bool result)."""
        return _bool(self) != _bool(_tensor(other))

    def where(self, condition, other):
        """self where condition holds, else other: torch.where(condition, self, other)."""
        return where(condition, self, other)

    def masked_select(self, mask):
        """The elements where mask (broadcast with self) is True, as a 1-D tensor: eager only, as
        x[mask] (its length depends on the values)."""
        if not isinstance(mask, Tensor) or mask.dtype != boolean:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise DTypeError(f"masked_select: expected a bool tensor for mask, got {got}\n  at {user_location()}")
        x, m = broadcast_tensors(self, mask)
        return x[m]

    # ---- value-dependent shapes (eager only): flame.frontend.data_dependent --------------------------
    def nonzero(self, *, as_tuple: bool = False):
        return data_dependent.nonzero(self, as_tuple=as_tuple)

    def argwhere(self):
        return data_dependent.argwhere(self)

    def count_nonzero(self, dim=None):
        return data_dependent.count_nonzero(self, dim)

    def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
               dim: int | None = None):
        return data_dependent.unique(self, sorted, return_inverse, return_counts, dim)

    def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None):
        return data_dependent.unique_consecutive(self, return_inverse, return_counts, dim)

    def bincount(self, weights=None, minlength: int = 0):
        return data_dependent.bincount(self, weights, minlength)

    def histc(self, bins: int = 100, min: float = 0.0, max: float = 0.0):  # noqa: A002
        return data_dependent.histc(self, bins, min, max)

    def histogram(self, bins, *, range=None, weight=None, density: bool = False):  # noqa: A002
        return data_dependent.histogram(self, bins, range=range, weight=weight, density=density)

    def unflatten(self, dim: int, sizes):
        """Dimension dim split into sizes (one may be -1), as torch.unflatten."""
        axis = dim_index("unflatten", dim, self.ndim)
        sizes, n = [int(k) for k in sizes], self.shape[axis]
        known = math.prod(k for k in sizes if k != -1)
        if sizes.count(-1) == 1 and known and n % known == 0:  # -1 is inferred from dim's size alone (of a
            sizes[sizes.index(-1)] = n // known  # zero-size tensor too, where the whole shape cannot say it)
        return self.reshape(*self.shape[:axis], *sizes, *self.shape[axis + 1:])

    def ravel(self):
        return self.reshape(-1)

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None):
        return uniform_(self, a, b, generator)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        return normal_(self, mean, std, generator)

    # ---- picking along a dim, rolling, moving dims -----------------------------------------------------
    def select(self, dim: int, index: int):
        """The slice at index along dim, that dim removed, as torch.select."""
        axis = dim_index("select", dim, self.ndim)
        n = self.shape[axis]
        if not -n <= index < n:
            raise IndexError(f"select: index {index} is out of range for dimension {dim} of size {n}\n"
                             f"  at {user_location()}")
        return self.narrow(axis, index % n, 1).squeeze(axis)

    def unbind(self, dim: int = 0):
        """Every slice along dim, that dim removed, as a tuple (torch.unbind): views, as split's."""
        axis = dim_index("unbind", dim, self.ndim)
        return views.several_views(tuple(self.select(axis, i) for i in range(self.shape[axis])), "unbind")

    @views.new_tensor
    def roll(self, shifts, dims=None):
        """Elements shifted along dims (of the flattened tensor when dims is None), those falling off
        one end coming back at the other, as torch.roll."""
        shifts = int_arg(shifts)
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
            axis = dim_index("roll", dim, self.ndim)
            n = self.shape[axis]
            k = shift % n if n else 0
            if k:
                out = cat([out.narrow(axis, n - k, k), out.narrow(axis, 0, n - k)], axis)
        return out

    def moveaxis(self, source, destination):
        """movedim under NumPy's name, as torch.moveaxis."""
        return self.movedim(source, destination)

    def movedim(self, source, destination):
        """Dims moved from source to destination (ints or sequences), the others in order, as torch.movedim."""
        src = (source,) if isinstance(source, int) else tuple(source)
        dst = (destination,) if isinstance(destination, int) else tuple(destination)
        if len(src) != len(dst):
            raise ValueError(f"movedim: {len(src)} source dims for {len(dst)} destinations")
        src = [dim_index("movedim", d, self.ndim) for d in src]
        dst = [dim_index("movedim", d, self.ndim) for d in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ValueError(f"movedim: repeated dims in {source} or {destination}")
        if self.ndim == 0:  # dim 0 (or -1) of a 0-d tensor is itself, as torch's: a view of it
            return self.permute()
        order: list = [None] * self.ndim
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(a for a in range(self.ndim) if a not in src)
        return self.permute(*[a if a is not None else next(rest) for a in order])

    def swapaxes(self, axis0: int, axis1: int):
        return self.transpose(axis0, axis1)

    def swapdims(self, dim0: int, dim1: int):
        """dims dim0 and dim1 exchanged (torch.swapdims, swapaxes's other name)."""
        return self.transpose(dim0, dim1)

    def t(self):
        """The transpose of a matrix (a 0-d or 1-D tensor as it is), as torch.t."""
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor of at most 2 dimensions, got {list(self.shape)} (use "
                             f"transpose or mT)\n  at {user_location()}")
        return self.transpose(0, 1) if self.ndim == 2 else self

    def t_(self):
        """self transposed in place, as torch's t_: a 0-d or 1-D tensor as it is; a square matrix takes its
        transpose's values. flame does not change a tensor's shape or a view's strides in place, so a
        non-square matrix and a view raise (write x = x.t())."""
        if self.ndim > 2:
            raise ShapeError(f"t_() expects a tensor with <= 2 dimensions, but self is {self.ndim}D\n"
                             f"  at {user_location()}")
        if self.ndim < 2:
            return self
        if self.shape[0] != self.shape[1]:
            raise ShapeError(f"t_: flame does not change a tensor's shape in place ({list(self.shape)} would "
                             f"become {list(self.shape)[::-1]}); write x = x.t()\n  at {user_location()}")
        if self._base is not None:  # torch restrides the view alone; writing its transpose would reach the base
            raise NotImplementedError(f"t_: flame does not change a view's strides in place (torch's t_ of a view "
                                      f"leaves its base as it is); write x = x.t(), which returns the view\n"
                                      f"  at {user_location()}")
        return self._inplace(lambda x: x.t(), what="t_")

    def is_floating_point(self) -> bool:
        return self.dtype.is_float

    # ---- new tensors like this one --------------------------------------------------------------------
    def new_full(self, size, fill_value, dtype=None, *, device=None):
        made = full(_shape_arg((size,) if isinstance(size, int) else tuple(size)), fill_value,
                    dtype_of(dtype) if dtype is not None else self.dtype)
        return made_like(self, placed(made, device, "new_full"))

    def new_zeros(self, *size, dtype=None, device=None):
        return placed(self.new_full(_shape_arg(size), 0, dtype), device, "new_zeros")

    def new_ones(self, *size, dtype=None, device=None):
        return placed(self.new_full(_shape_arg(size), 1, dtype), device, "new_ones")

    def new_empty(self, *size, dtype=None, device=None):
        """Like new_zeros: flame has no uninitialised memory to hand out."""
        return placed(self.new_zeros(*size, dtype=dtype), device, "new_empty")

    def new_tensor(self, data, dtype=None, *, device=None):
        return placed(Tensor(data, dtype if dtype is not None else self.dtype), device, "new_tensor")

    def pin_memory(self, device=None):
        """self: flame keeps a tensor's data where its executor runs (host memory on the reference
        executor, the GPU on the CUDA one), and DataLoader(pin_memory=True) stages batches through
        pinned host memory itself. Values and storage are unchanged."""
        return self

    def is_pinned(self, device=None) -> bool:
        """False: a flame tensor is never a page-locked host copy (see pin_memory)."""
        return False

    def type(self, dtype=None, non_blocking: bool = False):
        """torch's: the type's name ("flame.FloatTensor"), or this tensor converted (frontend/legacy_types.py)."""
        return legacy_types.type_name(self) if dtype is None else legacy_types.converted(self, dtype, non_blocking)

    def share_memory_(self):
        """self, unchanged, as torch's returns it: flame has no storage shared between processes (a tensor
        sent to another process is pickled, a copy), so there is nothing to move."""
        return self

    def contiguous(self, memory_format=None):
        """self when it is contiguous (row-major, no gaps), else a row-major copy (not a view). A
        memory_format changes nothing (flame/frontend/memory_format.py); preserve_format is refused as
        torch refuses it."""
        _memory_format.refuse_preserve("contiguous", memory_format)
        return self if views.is_contiguous(self) else self.clone()

    def is_contiguous(self, memory_format=None) -> bool:
        """Row-major with no gaps, as torch's (a transpose or a strided slice is not); with
        memory_format=flame.channels_last (channels_last_3d), whether the strides are those of that
        layout (dims of size 1 take any stride), which flame's row-major tensors have only where the
        two coincide."""
        _memory_format.refuse_preserve("is_contiguous", memory_format)
        if memory_format in (_memory_format.channels_last, _memory_format.channels_last_3d):
            return _memory_format.is_channels_last(self.shape, views.strides(self), memory_format)
        return views.is_contiguous(self)

    def stride(self, dim: int | None = None):
        """Strides in elements, as torch's (a traced tensor's follow its view ops, as eagerly)."""
        s = views.strides(self)
        return s if dim is None else s[dim_index("stride", dim, self.ndim)]

    def storage_offset(self) -> int:
        return views.storage_offset(self)

    def data_ptr(self) -> int:
        """The address of the first element (NumPy or CuPy memory)."""
        return views.data_ptr(self)

    def untyped_storage(self):
        """The memory this tensor shares with its views (its data_ptr() identifies it)."""
        return views.untyped_storage(self)

    def _is_view(self) -> bool:
        return self._base is not None

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nelement(self) -> int:
        return math.prod(self.shape)

