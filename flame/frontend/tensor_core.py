"""The core of Tensor's methods, each one apply() of an IR op or a few: conversions (to, float, ...), detach and
copy_, the arithmetic and comparison operators, elementwise math, reductions, movement (reshape, permute, gather,
...); and the functions every op module builds on: binary (an op with PyTorch's promotion, whose rules are in
frontend/promotion.py), matmul, full, where, cat, stack, pad (broadcast_shapes and broadcast_tensors:
frontend/broadcasting.py). frontend/methods.py binds TensorCore's methods onto Tensor."""

from __future__ import annotations

import builtins
from collections import namedtuple

import numpy as np

from flame.errors import AutogradError, DTypeError, FlameError, ShapeError, TraceError, ZeroDivisorError
from flame.frontend import autocast, opmath, pointwise_formulas, promotion, torch_formulas
from flame.frontend import memory_format as _memory_format
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.data_writes import DataLink, note_data_link
from flame.frontend.default_dtype import as_floating, floating
from flame.frontend.dispatch import apply, share_readers, tell_recorder
from flame.frontend.opmath import in_opmath
from flame.frontend.promotion import check_operand, is_bool, is_scalar, result_type, tensor_sequence, wrapped
from flame.frontend.tensor import Tensor, _axes, _shape_arg, check_int_range, default_dtype_for, dim_index, reduce_axes
from flame.frontend.torch_saves import of_every_element, saves
from flame.frontend.views import bump, link, new_tensor, view_error
from flame.ir.dtypes import DType, bf16, boolean, dtype_of, f16, f32, f64, i8, i16, i32, i64, u8
from flame.ir.registry import get as opdef
from flame.runtime.device import is_device

MaxMin = {n: namedtuple(n, ["values", "indices"]) for n in ("max", "min")}  # torch.return_types.max / min


class TensorCore:
    """Tensor's methods that need only apply() (no state of their own)."""

    __slots__ = ()

    def detach(self) -> Tensor:
        return self._detach_as({})

    def _detach_as(self, link_attrs) -> Tensor:  # link_attrs: .data's are a data_writes.DataLink
        trace = current_trace.get()
        # traced, or a concrete tensor this trace has read or written (its values there are its traced
        # Value's): an op autodiff does not differentiate through, a view of self
        if self._value is not None or (trace is not None and trace.current.get(id(self), (None,))[0] is self):
            out = apply("stop_gradient", self)
            link(out, self, opdef("stop_gradient"), link_attrs)
            note_data_link(link_attrs, out, trace)  # .data's: its own version counter, as torch's
            return out
        out = Tensor._concrete(self._data, self._dtype)
        # as torch's: the same storage and version counter; a view of self's base, so a write through it
        # reaches self's values (indexing.assign: without a gradient, as one under no_grad)
        link(out, self, opdef("stop_gradient"), link_attrs)
        tell_recorder("stop_gradient", (self,), out)
        return out

    def detach_(self) -> Tensor:
        """Detach in place, as torch's: self becomes a leaf that does not require grad (`h.detach_()`
        between truncated-BPTT batches). What was computed from self before still differentiates
        through its history. A view (other than one made by detach() or .data) raises, as torch's."""
        if self._base is not None and any(op.view is not None for op, _, _ in self._chain):  # not detach()'s
            raise AutogradError(f"Can't detach views in-place. Use detach() instead\n  at {user_location()}")
        if self._value is not None:  # traced: later uses read it through stop_gradient
            self._value, self.requires_grad = apply("stop_gradient", self)._value, False
            return self
        if self._node is None and not self.requires_grad:
            return self
        if current_trace.get() is not None:
            raise TraceError(
                f"detach_() of a tensor made outside @flame.compile would change it once, while "
                f"tracing: call it before the compiled function, or use x.detach()\n  at {user_location()}"
            )
        if self._node is not None:  # ops recorded before name self at this version: they read its history
            old = Tensor._concrete(self._data, self.dtype)
            old._node, old.requires_grad = self._node, self.requires_grad
            self._past = {**(self._past or {}), self._version: old}
            bump(self)
        self._node, self.requires_grad = None, False
        return self

    @property
    def data(self) -> Tensor:
        """The same values outside autograd, as torch's .data: eagerly a tensor sharing this one's
        buffer (a write through it is seen here, and records no gradient history; the backward reads
        self's storage as it is then: frontend/data_writes.py); while tracing, `detach()`."""
        if any(v is not None for v in (self._value, self._node, self._base, current_trace.get())):
            # a write through it must reach self's value and history: a view (a leaf's too while tracing)
            return self._detach_as(DataLink())
        out = Tensor._concrete(self._data, self._dtype)
        # a leaf's shares its buffer alone, with a version counter of its own, as torch's; a write through it
        share_readers(out, self)  # keeps what nodes read of self (frontend/leaf_writes.py)
        tell_recorder("stop_gradient", (self,), out)
        return out

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data must be set to a Tensor, got {type(value).__name__}\n  at {user_location()}")
        if current_trace.get() is not None:  # while tracing: the values written, no gradient recorded (as torch)
            if value.shape != self.shape or value.dtype != self.dtype:
                raise TraceError(f"inside @flame.compile .data takes a tensor of its own shape and dtype only ("
                                 f"{self.dtype}{list(self.shape)} <- {value.dtype}{list(value.shape)})\n  at "
                                 f"{user_location()}")
            with no_grad():
                self.copy_(value.detach())
            return
        if self.requires_grad and not value.dtype.is_floating_point:  # torch's check, a Parameter's too
            raise RuntimeError(f"data set to a tensor that requires gradients must be floating point or complex "
                               f"dtype (got {value.dtype})\n  at {user_location()}")
        self._data, self._dtype = value._data, value._dtype
        self._version += 1

    # ---- dtype conversion -------------------------------------------------------------------------
    def to(self, *args, dtype=None, device=None, non_blocking: bool = False, copy: bool = False,
           memory_format=None) -> Tensor:
        """to(dtype), to(device), to(device, dtype), to(other) (its device and dtype), as in PyTorch. A device is
        "cpu" or "cuda" (see `device`); a memory_format changes nothing (flame/frontend/memory_format.py)."""
        if len(args) == 1 and type(args[0]) is DType and dtype is None and device is None and not copy \
                and memory_format is None:
            return self if args[0] is self._dtype or args[0] == self._dtype else apply("cast", self, dtype=args[0])
        _memory_format.check("Tensor.to", memory_format)
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif is_device(a):
                device = a
            else:
                dtype = a
        out = self._to_device(device) if device is not None else self
        if dtype is not None:
            dt = dtype_of(dtype)
            out = out if dt == out.dtype else apply("cast", out, dtype=dt)
        return out.clone() if copy and out is self else out

    def float(self) -> Tensor:
        return self.to(f32)

    def double(self) -> Tensor:
        return self.to(f64)

    def half(self) -> Tensor:
        return self.to(f16)

    def bfloat16(self) -> Tensor:
        return self.to(bf16)

    def long(self) -> Tensor:
        return self.to(i64)

    def int(self) -> Tensor:
        return self.to(i32)

    def bool(self) -> Tensor:
        return self.to(boolean)

    def byte(self) -> Tensor:
        return self.to(u8)

    def char(self) -> Tensor:
        return self.to(i8)

    def short(self) -> Tensor:
        return self.to(i16)

    # ---- arithmetic -------------------------------------------------------------------------------
    def __add__(self, o):
        return binary("add", self, o)

    def __radd__(self, o):
        return binary("add", o, self)

    def __sub__(self, o):
        return binary("sub", self, o)

    def __rsub__(self, o):
        return binary("sub", o, self)

    def __mul__(self, o):
        return binary("mul", self, o)

    def __rmul__(self, o):
        return binary("mul", o, self)

    def __truediv__(self, o):
        return binary("div", self, o)

    @autocast.policy("f32", cpu="")  # autocast: torch's `o / x` is x.reciprocal() * o: reciprocal's lists
    def __rtruediv__(self, o):
        return binary("div", o, self)

    def __pow__(self, o):
        return binary("pow", self, o)

    def __rpow__(self, o):
        return binary("pow", o, self)

    def __neg__(self):
        return apply("neg", self)

    def __abs__(self):
        return apply("abs", self)

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(o, self)

    def __lt__(self, o):
        return binary("lt", self, o)

    def __le__(self, o):
        return binary("le", self, o)

    def __gt__(self, o):
        return binary("gt", self, o)

    def __ge__(self, o):
        return binary("ge", self, o)

    def __eq__(self, o):  # type: ignore[override]
        return binary("eq", self, o)

    def __ne__(self, o):  # type: ignore[override]
        return binary("ne", self, o)

    __hash__ = object.__hash__  # defining __eq__ would make a class unhashable: tensors hash by identity

    def __and__(self, o):
        return bitwise("and", self, o)

    def __rand__(self, o):
        return bitwise("and", o, self)

    def __or__(self, o):
        return bitwise("or", self, o)

    def __ror__(self, o):
        return bitwise("or", o, self)

    def __xor__(self, o):
        return bitwise("xor", self, o)

    def __rxor__(self, o):
        return bitwise("xor", o, self)

    def __lshift__(self, o):
        return bitwise("lshift", self, o)

    def __rlshift__(self, o):
        return bitwise("lshift", o, self)

    def __rshift__(self, o):
        return bitwise("rshift", self, o)

    def __rrshift__(self, o):
        return bitwise("rshift", o, self)

    def __invert__(self):
        return bitwise_not(self)

    def bitwise_and(self, other):
        return bitwise("and", self, other)

    def bitwise_or(self, other):
        return bitwise("or", self, other)

    def bitwise_xor(self, other):
        return bitwise("xor", self, other)

    def bitwise_left_shift(self, other):
        return bitwise("lshift", self, other)

    def bitwise_right_shift(self, other):
        return bitwise("rshift", self, other)

    def bitwise_not(self):
        return bitwise_not(self)

    def pow(self, exponent):
        return binary("pow", self, exponent)

    def maximum(self, other):
        return binary("maximum", self, other)

    def minimum(self, other):
        return binary("minimum", self, other)

    # ---- unary math (float ops promote integer inputs to the default floating dtype, as torch's) ---
    def _float_unary(self, name, **attrs):
        x = as_floating(self)
        return apply(name, x, **attrs)

    def exp(self):
        return self._float_unary("exp")

    def log(self):
        return self._float_unary("log")

    def sqrt(self):
        return self._float_unary("sqrt")

    def rsqrt(self):
        return self._float_unary("rsqrt")

    def reciprocal(self):
        return self._float_unary("reciprocal")

    def sin(self):
        return self._float_unary("sin")

    def cos(self):
        return self._float_unary("cos")

    def tanh(self):
        return self._float_unary("tanh")

    def sigmoid(self):
        return self._float_unary("sigmoid")

    def erf(self):
        return self._float_unary("erf")

    def gelu(self, approximate: str = "none"):
        return self._float_unary("gelu", approximate=approximate)

    def silu(self):
        return self._float_unary("silu")

    def leaky_relu(self, negative_slope: float = 0.01):
        return self._float_unary("leaky_relu", negative_slope=negative_slope)

    def relu(self):
        return apply("relu", self)

    def abs(self):
        return apply("abs", self)

    def neg(self):
        return apply("neg", self)

    def sign(self):
        return apply("sign", self) if self.dtype != boolean else self.clone()

    def floor(self):
        return apply("floor", self)

    def ceil(self):
        return apply("ceil", self)

    def round(self, *, decimals: int = 0):
        """Half to even, as torch.round; decimals=d rounds x * 10**d (x / 10**-d for d < 0) as torch does."""
        if not decimals:
            return apply("round", self)
        if not self.dtype.is_float:
            raise DTypeError(f'round: "round" with decimals is not implemented for {self.dtype} tensors (as in '
                             f"PyTorch)\n  at {user_location()}")
        scale = 10.0 ** abs(int(decimals)) if abs(int(decimals)) <= 308 else float("inf")  # NaN, as torch's
        return (self * scale).round() / scale if decimals > 0 else (self / scale).round() * scale

    def logical_not(self):
        """True where self is zero (any dtype; a bool result), as torch.logical_not."""
        return apply("logical_not", self if self.dtype == boolean else self != 0)

    @autocast.policy("f32", cpu="")  # autocast: torch's square is pow(x, 2): pow's lists (CUDA f32, no CPU one)
    def square(self):
        return self * self if self.dtype != boolean else self.to(i64) * self.to(i64)  # torch: bool squares to int64

    # ---- reductions -------------------------------------------------------------------------------
    @autocast.policy("f32", cpu="")  # autocast: on torch's CUDA float32 list (not with a dtype=), no CPU list
    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        if dtype is not None and dtype_of(dtype) == boolean:  # torch: a sum of bools in bool is any()
            return self.to(boolean).sum(dim, keepdim) != 0
        x = self.to(dtype) if dtype is not None else self
        if dtype is None and not x.dtype.is_float:  # PyTorch sums bool and integers in int64: no wrap
            x = x.to(i64)
        return apply("reduce_sum", x, axes=reduce_axes(dim, self.ndim, "sum"), keepdim=keepdim)

    def mean(self, dim=None, keepdim: bool = False, *, dtype=None):
        """The mean over dim (all elements by default); as torch.mean, an integer or bool tensor needs a
        floating `dtype` (it raises otherwise)."""
        x = self.to(dtype) if dtype is not None else self
        if not x.dtype.is_float:
            raise DTypeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                             f"dtype, got {x.dtype} (as in PyTorch: x.float().mean() or x.mean(dtype=flame.f32))"
                             f"\n  at {user_location()}")
        return apply("reduce_mean", x, axes=reduce_axes(dim, self.ndim, "mean"), keepdim=keepdim)

    def amax(self, dim=None, keepdim: bool = False):
        if self.dtype == boolean:  # torch: any / all, as bools
            return self.to(u8).amax(dim, keepdim).to(boolean)
        return apply("reduce_max", self, axes=reduce_axes(dim, self.ndim, "amax"), keepdim=keepdim)

    def amin(self, dim=None, keepdim: bool = False):
        if self.dtype == boolean:
            return self.to(u8).amin(dim, keepdim).to(boolean)
        return apply("reduce_min", self, axes=reduce_axes(dim, self.ndim, "amin"), keepdim=keepdim)

    @saves(of_every_element, vjp=pointwise_formulas.max_of_every_element)
    def max(self, dim: int | None = None, keepdim: bool = False):
        """max() of all elements; max(dim) -> (values, indices); max(other): the elementwise maximum."""
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        if dim is None:  # the gradient shared among the ties, as torch's (amax's: NaN at a NaN)
            return opmath.evenly_distributed(self, self.amax())
        ranked = self.to(u8) if self.dtype == boolean else self  # bool: the indices of its 0/1 values
        return _picked("max", self, ranked.argmax(dim, keepdim), dim, keepdim)

    @saves(of_every_element, vjp=pointwise_formulas.min_of_every_element)
    def min(self, dim: int | None = None, keepdim: bool = False):
        """min() of all elements; min(dim) -> (values, indices); min(other): the elementwise minimum."""
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:  # the gradient shared among the ties, as torch's (amax's: NaN at a NaN)
            return opmath.evenly_distributed(self, self.amin())
        ranked = self.to(u8) if self.dtype == boolean else self  # bool: the indices of its 0/1 values
        return _picked("min", self, ranked.argmin(dim, keepdim), dim, keepdim)

    def argmax(self, dim: int | None = None, keepdim: bool = False):
        if dim is None:  # torch: keepdim=True keeps every dim as 1
            r = apply("argmax", self.reshape(-1), axis=0, keepdim=False)
            return r.reshape([1] * self.ndim) if keepdim else r
        if self.ndim == 0:
            dim_index("argmax", dim, 0)
            return apply("argmax", self.reshape(1), axis=0, keepdim=False)
        return apply("argmax", self, axis=dim_index("argmax", dim, self.ndim), keepdim=keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False):
        # an order-reversing map with no overflow: -x wraps INT_MIN onto itself, -1 - x maps the
        # integer range onto itself
        return (-self if self.dtype.is_float else -1 - self).argmax(dim, keepdim)

    @autocast.policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    @saves("self", vjp=torch_formulas.var)
    def var(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *, correction: float | None = None):
        """The variance over dim (all by default) with torch's signature: the squared deviations' sum over
        n - correction (default 1, Bessel's correction; unbiased=False means 0)."""
        dim, c = opmath.var_correction("var", dim, unbiased, correction, keepdim)
        axes = reduce_axes(dim, self.ndim, "var")
        n = int(np.prod([self.shape[a] for a in axes]))
        if n <= c:
            return _var_past_correction(self, axes, keepdim, n - c)
        if self.dtype in (f16, bf16):
            return opmath.rounded_var(self, axes, keepdim, n - c)
        d = self - self.mean(axes, keepdim=True)
        return (d * d).sum(axes, keepdim=keepdim) / float(n - c)

    @autocast.policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    @saves("self", "result", vjp=torch_formulas.std)
    def std(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *, correction: float | None = None):
        """The square root of var (same arguments); where the deviation is zero the gradient is zero, as
        torch's (sqrt's infinite derivative there is not taken)."""
        dim, c = opmath.var_correction("std", dim, unbiased, correction, keepdim)
        if self.dtype in (f16, bf16):
            axes = reduce_axes(dim, self.ndim, "std")
            n = int(np.prod([self.shape[a] for a in axes]))
            if n > c:
                return opmath.rounded_std(self, axes, keepdim, n - c)
        v = self.var(dim, keepdim=keepdim, correction=c)
        zero = v == 0
        return where(zero, 0.0, where(zero, 1.0, v).sqrt())

    # ---- movement ---------------------------------------------------------------------------------
    def _alias(self):
        """A view of the whole tensor as it is: what torch's views return where they change nothing (a new
        tensor object, whose _base is this one and whose hooks are its own), an identity permute."""
        return apply("permute", self, perm=list(range(self.ndim)))

    def reshape(self, *shape):
        shape = list(_shape_arg(shape))
        if shape.count(-1) > 1:
            raise ShapeError(f"reshape {list(self.shape)} -> {shape}: only one dimension can be inferred (only "
                             f"one -1 allowed)\n  at {user_location()}")
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape {list(self.shape)} -> {shape}: cannot infer the -1 dimension (shape "
                                 f"{shape} is invalid for input of size {self.numel()})\n  at {user_location()}")
            shape[shape.index(-1)] = self.numel() // known
        if tuple(shape) == self.shape:
            return self._alias()
        return apply("reshape", self, shape=shape)

    def view(self, *shape):
        """The tensor under another shape, sharing its storage (as reshape, which copies where the
        strides allow no view; view raises there, as torch's). view(dtype) of the tensor's own dtype is
        itself; of another dtype (torch's reinterpretation of the bytes) it raises: flame has none."""
        if len(shape) == 1 and isinstance(shape[0], DType):
            if shape[0] == self.dtype:
                return self.reshape(self.shape)
            raise DTypeError(f"view({shape[0]}): flame does not reinterpret a tensor's bytes as another dtype "
                             f"(torch's Tensor.view(dtype)); x.to({shape[0].name!r}) converts the values"
                             f"\n  at {user_location()}")
        out = self.reshape(*shape)
        if out.shape != self.shape and out._base is None and out.numel() > 1:  # reshape copied (traced too)
            raise view_error(self, out.shape)
        return out

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            dim_index("flatten", start_dim, 0), dim_index("flatten", end_dim, 0)
            return self.reshape(1)
        s, e = dim_index("flatten", start_dim, self.ndim), dim_index("flatten", end_dim, self.ndim)
        if s > e:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}\n  at {user_location()}")
        merged = int(np.prod(self.shape[s:e + 1], dtype=np.int64))  # no -1: a zero-size tensor flattens too
        return self.reshape(*self.shape[:s], merged, *self.shape[e + 1:])

    def permute(self, *dims):
        perm = [dim_index("permute", d, self.ndim) for d in _shape_arg(dims)]
        if sorted(perm) != list(range(self.ndim)):
            raise ShapeError(f"permute: dims {list(_shape_arg(dims))} are not a permutation of the "
                             f"{self.ndim} dimensions of {list(self.shape)}\n  at {user_location()}")
        return apply("permute", self, perm=perm) if self.ndim else self._alias()

    def transpose(self, dim0: int, dim1: int):
        a, b = dim_index("transpose", dim0, self.ndim), dim_index("transpose", dim1, self.ndim)
        if self.ndim < 2 or a == b:
            return self._alias()
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return apply("permute", self, perm=perm)

    @property
    def T(self):  # noqa: N802
        return self._alias() if self.ndim < 2 else apply("permute", self, perm=list(range(self.ndim))[::-1])

    @property
    def mT(self):  # noqa: N802
        return self.transpose(-2, -1)

    def unsqueeze(self, dim: int):
        return apply("unsqueeze", self, axes=[dim_index("unsqueeze", dim, self.ndim + 1)])

    def squeeze(self, dim=None):
        axes = range(self.ndim) if dim is None else _axes(dim, self.ndim, "squeeze")
        axes = [a for a in axes if self.shape[a] == 1]  # squeezing a dim of another size is a no-op
        return apply("squeeze", self, axes=axes) if axes else self._alias()

    def broadcast_to(self, *shape):
        shape = _shape_arg(shape)
        return self._alias() if shape == self.shape else apply("broadcast_to", self, shape=shape)

    def expand(self, *shape):
        shape = _shape_arg(shape)
        lead = len(shape) - self.ndim
        if lead < 0 or -1 in shape[:lead]:
            raise ShapeError(f"expand {list(self.shape)} -> {list(shape)}: "
                             + ("fewer sizes than dimensions" if lead < 0 else "-1 is not allowed in a new "
                                "leading dimension") + f"\n  at {user_location()}")
        full_shape = [self.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)]
        return self.broadcast_to(full_shape)

    def expand_as(self, other: Tensor):
        return self.broadcast_to(other.shape)

    def type_as(self, other: Tensor) -> Tensor:
        """self in other's dtype (itself when it has it), as torch's."""
        return self.to(other.dtype)

    @new_tensor
    def flip(self, *dims):
        dims = _shape_arg(dims)
        axes = reduce_axes(dims, self.ndim, "flip") if dims else ()  # a dim named twice raises, as torch's
        return apply("flip", self, axes=list(axes)) if axes else self

    def triu(self, diagonal: int = 0):
        return apply("triu", self, k=diagonal)

    def tril(self, diagonal: int = 0):
        return apply("tril", self, k=diagonal)

    def clone(self, *, memory_format=None):
        _memory_format.check("clone", memory_format)
        # x * 1, not x + 0: -0.0 + 0 is +0.0
        return self * 1 if self.dtype != boolean else self.logical_not().logical_not()


_WIDE_FLOATS = frozenset((f32.name, f64.name))  # the dtypes a Python number is rounded to, with no opmath


def binary(name: str, a, b) -> Tensor:
    """A binary op with PyTorch's promotion (result_type); `div` is true division (integers go to the default
    floating dtype); on two bool tensors + and max are logical or, * and min logical and, - raises, as torch."""
    if name == "pow" and isinstance(a, Tensor) and isinstance(b, float) and b in (0.5, -0.5):
        return opmath.half_power(a, b)  # PyTorch's kernel: sqrt / rsqrt
    # first what the rules below come to for most ops' operands (an optimizer's update does little else):
    # two tensors of one floating dtype, or an f32 / f64 tensor and a Python int or float
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            if a._dtype is b._dtype and a._dtype.kind == "float":
                return apply(name, a, b)
        elif (type(b) is float or type(b) is int) and a._dtype.name in _WIDE_FLOATS:
            return apply(name, a, float(b))
    elif type(a) in (float, int) and isinstance(b, Tensor) and b._dtype.name in _WIDE_FLOATS and name != "div":
        return apply(name, float(a), b)  # (s / x is x.reciprocal() * s: opmath.in_opmath)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise FlameError(f"{name}: at least one operand must be a flame.Tensor")
    check_operand(name, a)
    check_operand(name, b)
    a = Tensor(a) if isinstance(a, np.ndarray) else a
    b = Tensor(b) if isinstance(b, np.ndarray) else b
    dt = result_type(a, b)
    if dt == boolean and opdef(name).on_bool:  # the logical op it is on bools (the OpDef's `on_bool` trait)
        a, b = (x if isinstance(x, Tensor) else full((), bool(x), boolean) for x in (a, b))
        return apply(opdef(name).on_bool, a, b)
    if name == "sub" and (is_bool(a) or is_bool(b)):
        raise DTypeError(f"sub: subtraction with a bool tensor is not supported (as in PyTorch); a != b "
                         f"is the exclusive or of two, ~mask or logical_not() inverts a mask\n  at {user_location()}")
    if name == "pow" and not dt.is_float:
        _check_int_pow(a, b, dt)
    if name in ("floor_divide", "remainder", "fmod") and not dt.is_float and is_scalar(b) and b == 0:
        raise ZeroDivisorError(f"{name}: integer division by zero (torch: RuntimeError: ZeroDivisionError)"
                               f"\n  at {user_location()}")
    if name == "div":
        dt = floating(dt)
    if name == "pow" and dt == boolean:  # bool ** True is the tensor, bool ** False all True (torch)
        return binary("logical_or", a, not b)
    widened = in_opmath(name, a, b, dt)
    if widened is not None:
        return widened
    a, b = (
        (x if x._dtype == dt else x.to(dt)) if isinstance(x, Tensor) else float(x) if dt.is_float else wrapped(x, dt)
        for x in (a, b)
    )
    return apply(name, a, b)


def _var_past_correction(x: Tensor, axes, keepdim: bool, room: int) -> Tensor:
    """var of x over axes where the correction is at least the count n (room = n - correction <= 0), as PyTorch's:
    the value is the squared deviations' sum over max(0, room) (inf, or NaN where the sum is 0), its gradient
    2 (x - mean) / room (inf where room is 0, finite past it; not inf times the mean's vanishing gradient's NaN)."""
    d = x - x.mean(axes, keepdim=True).detach()
    s = (d * d).sum(axes, keepdim=keepdim)
    if room == 0:
        return s / 0.0
    return s / float(room) + (s / 0.0 - s / float(room)).detach()


def _picked(kind: str, x: Tensor, idx: Tensor, dim: int, keepdim: bool):
    """torch's (values, indices) namedtuple `kind` of max(dim) / min(dim): values read at the indices, so the
    gradient goes to the index returned (amax splits it among ties)."""
    if not x.ndim:
        return MaxMin[kind](x.clone(), idx)  # a new tensor, as torch's
    axis = dim_index(kind, dim, x.ndim)
    values = x.gather(axis, idx if keepdim else idx.unsqueeze(axis))
    return MaxMin[kind](values if keepdim else values.squeeze(axis), idx)


def _check_int_pow(a, b, dt: DType) -> None:
    """PyTorch's errors for integer pow: bool ** bool, and a negative Python exponent (a tensor of
    negative exponents gives 0, or +-1 for bases +-1)."""
    if dt == boolean and not (isinstance(a, Tensor) and isinstance(b, (bool, np.bool_))):
        raise DTypeError(f"pow: not implemented for bool tensors (as in PyTorch); use logical_and, or cast "
                         f"with .int()\n  at {user_location()}")
    if not isinstance(b, Tensor) and b < 0:
        raise DTypeError(f"pow: integers to negative integer powers are not allowed (as in PyTorch); use a "
                         f"float exponent ({b}.0)\n  at {user_location()}")


def bitwise(fn: str, a, b) -> Tensor:
    """torch.bitwise_and / or / xor / left_shift / right_shift with PyTorch's promotion: integers and
    bools (and, or, xor), integers (shifts); floats raise."""
    name = {"lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift"}.get(fn, f"bitwise_{fn}")
    a = Tensor(a) if isinstance(a, np.ndarray) else a
    b = Tensor(b) if isinstance(b, np.ndarray) else b
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise FlameError(f"{name}: at least one operand must be a flame.Tensor")
    for x in (a, b):
        if not isinstance(x, Tensor) and (not is_scalar(x) or isinstance(x, (float, np.floating))):
            raise DTypeError(f"{name}: operand {x!r} is not an integer or bool\n  at {user_location()}")
    dt = result_type(a, b)
    if dt.is_float or (dt == boolean and fn in ("lshift", "rshift")):
        raise DTypeError(f'{name}: not implemented for {dt} tensors (as in PyTorch: "{name}" takes integers'
                         f'{"" if fn in ("lshift", "rshift") else " and bools"})\n  at {user_location()}')
    if dt == boolean and fn != "xor":
        return binary(f"logical_{fn}", a, b)
    a, b = (x.to(dt) if isinstance(x, Tensor) else full((), wrapped(x, dt), dt) for x in (a, b))
    return apply("bitwise", a, b, fn=fn)


def bitwise_not(x: Tensor) -> Tensor:
    """~x: logical not of bools, the bitwise complement of integers (torch.bitwise_not); floats raise."""
    if x.dtype == boolean:
        return apply("logical_not", x)
    if not x.dtype.is_int:
        raise DTypeError(f"bitwise_not: not implemented for {x.dtype} tensors (as in PyTorch: ~ and "
                         f"bitwise_not take integers and bools)\n  at {user_location()}")
    return bitwise("xor", x, full((), int(np.iinfo(x.dtype.np_dtype).max) if x.dtype == u8 else -1, x.dtype))


def _autocast_lowers(*dtypes: DType) -> bool:
    """Inside flame.autocast a matmul casts f16/bf16/f32 operands to one dtype (as torch.autocast)."""
    return autocast.is_autocast_enabled() and all(d in (f16, bf16, f32) for d in dtypes)


def matmul(input, other) -> Tensor:  # noqa: A002
    """`input @ other` with NumPy's rules for 1-D operands (the IR's matmul wants rank >= 2). Both operands
    must have one dtype (PyTorch's rule: bf16 @ f32, or an integer or f64 input to an f32 Linear,
    raises flame.DTypeError naming the line, so an f64 batch never runs an f32 model in f64), except
    inside flame.autocast, which casts floating operands to its dtype. Integer operands give torch's CPU
    result (sums of products, wrapping in their dtype), computed as a broadcast product and a sum."""
    a = input if isinstance(input, Tensor) else Tensor(input)
    b = other if isinstance(other, Tensor) else Tensor(other)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul {a.dtype}{list(a.shape)} @ {b.dtype}{list(b.shape)}: both operands "
                         f"need at least one dimension\n  at {user_location()}")
    if a.dtype != b.dtype and not _autocast_lowers(a.dtype, b.dtype):  # PyTorch raises too: an f64 batch
        raise DTypeError(f"matmul {a.dtype}{list(a.shape)} @ {b.dtype}{list(b.shape)}: both operands must "
                         f"have the same dtype, as in PyTorch (convert one with .to({b.dtype.name!r}) or "
                         f".to({a.dtype.name!r}))\n  at {user_location()}")
    a1, b1 = a.ndim == 1, b.ndim == 1
    a2, b2 = a.unsqueeze(0) if a1 else a, b.unsqueeze(1) if b1 else b
    if a.dtype.is_int:  # as torch's CPU (cuBLAS has no integer GEMM): the products summed, wrapping in the dtype
        out = (a2.unsqueeze(-1) * b2.unsqueeze(-3)).sum(-2).to(a.dtype)
    else:
        out = apply("matmul", a2, b2)
    if a1 and b1:
        return out.reshape(())
    if a1 or b1:
        out = out.squeeze(out.ndim - 2 if a1 else out.ndim - 1)
    return out


def full(size, fill_value, dtype=None, *, device=None) -> Tensor:
    """A tensor of shape size holding fill_value (dtype: given, else the value's default), as torch.full."""
    dt = dtype_of(dtype) if dtype is not None else default_dtype_for(fill_value)
    if dt.is_int and isinstance(fill_value, (int, float, np.number)) and not isinstance(fill_value, bool):
        check_int_range(fill_value, dt)
        fill_value = wrapped(fill_value, dt) if isinstance(fill_value, (int, np.integer)) else fill_value
    return placed(apply("full", shape=tuple(size), value=fill_value, dtype=dt), device, "full")


def placed(t: Tensor, device, what: str) -> Tensor:
    """A factory function's `device=`, as torch's: None, or the device this process runs on (t itself);
    another device raises as Tensor.to does, and a value that names no device is a TypeError."""
    if device is None:
        return t
    if not is_device(device):
        raise TypeError(f"{what}: device must name a device ('cpu', 'cuda', 'cuda:0'), got {device!r}\n"
                        f"  at {user_location()}")
    return t._to_device(device)


_NO_BRANCH = object()


def where(condition: Tensor, input=_NO_BRANCH, other=_NO_BRANCH) -> Tensor:  # noqa: A002
    """Elementwise condition ? input : other (NumPy broadcasting); input and other are promoted to one dtype
    (result_type). where(condition) alone is nonzero(condition, as_tuple=True), as torch's."""
    if input is _NO_BRANCH and other is _NO_BRANCH:
        return condition.nonzero(as_tuple=True)
    cond, a, b = condition, input, other
    if isinstance(cond, Tensor) and cond.dtype not in (boolean, u8):
        raise DTypeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                         f"{cond.dtype} (as in PyTorch: compare it, e.g. x != 0)\n  at {user_location()}")
    dt = result_type(a, b)
    if not builtins.any(isinstance(x, Tensor) for x in (a, b)):
        a = full((), a, dt)
    a, b = (x.to(dt) if isinstance(x, Tensor) else wrapped(x, dt) if dt.is_int else x for x in (a, b))
    return apply("where", cond.to(boolean), a, b)


@autocast.policy("", cpu="promote")  # autocast: on PyTorch's CPU promote list (the list's tensors in order)
def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenate along dim (all tensors share one dtype)."""
    tensors = tensor_sequence("cat", tensors)
    if not tensors:
        raise ShapeError(f"cat: expected a non-empty list of tensors\n  at {user_location()}")
    if builtins.any(t.ndim > 1 for t in tensors):  # torch skips 1-D empty tensors among others (legacy)
        tensors = [t for t in tensors if t.shape != (0,)] or tensors
    tensors = promotion.in_common_dtype(tensors)
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise ShapeError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated"
                             f"\n  at {user_location()}")
    return apply("concat", *tensors, axis=dim_index("cat", dim, tensors[0].ndim))


concat = cat


@autocast.policy("", cpu="promote")  # autocast: on PyTorch's CPU promote list, as cat
def stack(tensors, dim: int = 0) -> Tensor:
    """Join same-shaped tensors along a new dimension dim."""
    tensors = tensor_sequence("stack", tensors)
    if not tensors:
        raise ShapeError(f"stack: expected a non-empty list of tensors\n  at {user_location()}")
    dim = dim_index("stack", dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def pad(x: Tensor, pads, value: float = 0) -> Tensor:
    """Constant padding; pads is one (lo, hi) pair per axis, first axis first (NumPy's form; torch's
    order, last dimension first, is flame.nn.functional.pad)."""
    return apply("pad", x, pads=pads, value=value)
