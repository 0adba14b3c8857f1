"""flame.Tensor: PyTorch-named tensors. A Tensor is either concrete (holds an executor array) or
traced (holds an IR Value of the trace being recorded). Every op goes through dispatch.apply."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from flame.errors import DimError, DTypeError, FlameError, ShapeError, TraceError
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.frontend.tensor_math import TensorMath
from flame.frontend.tensor_ops import TensorOps
from flame.ir.dtypes import DType, bf16, boolean, dtype_of, f16, f32, f64, i32, i64, promote

MaxMin = namedtuple("MaxMin", ["values", "indices"])


def dim_index(op: str, dim: int, rank: int) -> int:
    """PyTorch's dim wrapping: dim in [-rank, rank) (a 0-d tensor takes 0 and -1), made non-negative;
    else a DimError (an IndexError, as in PyTorch) naming the user's line."""
    n = max(rank, 1)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or not -n <= dim < n:
        raise DimError(f"{op}: axis {dim!r} is out of range for a rank-{rank} tensor (dimension out of range: "
                       f"expected to be in range of [{-n}, {n - 1}])\n  at {user_location()}")
    return int(dim) % n


def _axes(dim, rank: int, op: str = "reduce") -> tuple[int, ...]:
    if dim is None:
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    axes = sorted({dim_index(op, d, rank) for d in dims})
    return tuple(a for a in axes if a < rank)  # a 0-d tensor's dim 0 names no axis


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


class Tensor(TensorOps, TensorMath):
    """A tensor. Concrete tensors live on the current device (NumPy or CuPy arrays); traced tensors
    exist while @flame.compile records a function. Methods beyond the core: frontend/tensor_ops.py and
    frontend/tensor_math.py."""

    __slots__ = ("_data", "_dtype", "_value", "_trace", "requires_grad", "_grad", "_node", "_version",
                 "_role", "_past", "__weakref__")
    __array_priority__ = 1000  # numpy scalars defer to Tensor's reflected operators

    def __init__(self, data: Any = None, dtype: Any = None, requires_grad: bool = False):
        from flame.frontend.creation import to_array

        arr, dt = to_array(data, dtype)
        self._init(arr, dt, None, None)
        self.requires_grad = bool(requires_grad)

    def _init(self, data, dtype, value, trace):
        self._data, self._dtype, self._value, self._trace = data, dtype, value, trace
        self.requires_grad, self._grad, self._node, self._version, self._role = False, None, None, 0, None
        self._past = None  # {version: the tensor as it was then}, left by in-place writes (indexing.stand_in)

    @classmethod
    def _concrete(cls, data, dtype: DType) -> Tensor:
        t = object.__new__(cls)
        t._init(data, dtype, None, None)
        return t

    @classmethod
    def _traced(cls, value, trace) -> Tensor:
        t = object.__new__(cls)
        t._init(None, value.type.dtype, value, trace)
        return t

    # ---- metadata -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.type.shape if self._value is not None else tuple(self._data.shape)

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim_index("size", dim, self.ndim)]

    def _type(self):
        from flame.ir.types import TensorType

        return TensorType(self.shape, self.dtype)

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_traced(self) -> bool:
        return self._value is not None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    __hash__ = object.__hash__

    # ---- reading values ---------------------------------------------------------------------------
    def _need_concrete(self, what: str) -> None:
        if self._value is not None:
            raise TraceError(f"{what} reads a tensor's value, which does not exist while tracing "
                             f"@flame.compile (Python control flow runs at trace time; use "
                             f"flame.where for data-dependent choices)\n  at {user_location()}")

    def numpy(self) -> np.ndarray:
        self._need_concrete(".numpy()")
        from flame.runtime.device import executor

        return executor().to_numpy(self._data)

    def item(self) -> float | int | bool:
        self._need_concrete(".item()")
        if self.numel() != 1:
            raise ShapeError(f".item() needs a tensor with one element, got shape {list(self.shape)}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        self._need_concrete("bool(tensor)")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        self._need_concrete("__dlpack__")
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __repr__(self) -> str:
        if self._value is not None:
            return f"Tensor(traced {self._value.type})"
        grad = ", requires_grad=True" if self.requires_grad else ""
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self.dtype.name}{grad})"

    # ---- autograd ---------------------------------------------------------------------------------
    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient. Inside @flame.compile, a concrete tensor's .grad is part of the
        traced program: the body's first read (before it assigns .grad) becomes a graph input bound to
        "this tensor's .grad at call time" (or, when it was None, a guard that it still is), and what
        the body assigns (zero_grad(), backward()) is handed to the tensor after each call."""
        if self._value is None:
            from flame.frontend.context import current_trace

            trace = current_trace.get()
            if trace is not None:
                return trace.read_grad(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if self._value is None:
            from flame.frontend.context import current_trace

            trace = current_trace.get()
            if trace is not None:
                trace.write_grad(self, value)
                return
        self._grad = value

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's .grad (torch's Tensor.backward). The graph
        behind self is freed unless retain_graph=True: a second backward through it raises."""
        from flame.frontend.autograd import backward

        backward(self, gradient, retain_graph)

    def detach(self) -> Tensor:
        if self._value is not None:  # traced: an op autodiff does not differentiate through
            return apply("stop_gradient", self)
        return Tensor._concrete(self._data, self._dtype)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        self.requires_grad = flag
        return self

    # ---- in-place updates (pure IR: a rebinding while tracing, a buffer write when eager) ---------
    def copy_(self, src: Tensor | float) -> Tensor:
        from flame.frontend.context import current_trace

        src = src if isinstance(src, Tensor) else full(self.shape, src, self.dtype)
        if src.dtype != self.dtype:
            src = src.to(self.dtype)
        if src.shape != self.shape:
            src = src.broadcast_to(self.shape)
        trace = current_trace.get()
        if trace is not None:
            trace.assign(self, trace.value_of(src))
        elif self._value is not None:
            raise TraceError("copy_ into a traced tensor outside its trace")
        else:
            self._data[...] = src._data
            self._version += 1
        return self

    def add_(self, other, alpha: float = 1.0) -> Tensor:
        return self._inplace(lambda x: x + other * alpha if alpha != 1.0 else x + other, other)

    def sub_(self, other, alpha: float = 1.0) -> Tensor:
        return self._inplace(lambda x: x - other * alpha if alpha != 1.0 else x - other, other)

    def mul_(self, other) -> Tensor:
        return self._inplace(lambda x: x * other, other)

    # x += y and its kin update x itself, as in PyTorch: the same object keeps its identity,
    # requires_grad and .grad (a Parameter stays the module's parameter). See TensorOps._inplace.
    def __iadd__(self, o):
        return self._inplace(lambda x: x + o, o)

    def __isub__(self, o):
        return self._inplace(lambda x: x - o, o)

    def __imul__(self, o):
        return self._inplace(lambda x: x * o, o)

    def __itruediv__(self, o):
        return self._inplace(lambda x: x / o, o)

    def __ifloordiv__(self, o):
        return self._inplace(lambda x: x // o, o)

    def __imod__(self, o):
        return self._inplace(lambda x: x % o, o)

    def __ipow__(self, o):
        return self._inplace(lambda x: x**o, o)

    def __iand__(self, o):
        return self._inplace(lambda x: x & o, o)

    def __ior__(self, o):
        return self._inplace(lambda x: x | o, o)

    def __imatmul__(self, o):
        raise TypeError("In-place matrix multiplication is not supported: write `a = a @ b` instead of "
                        f"`a @= b` (as in PyTorch)\n  at {user_location()}")

    @property
    def data(self) -> Tensor:
        """The same values outside autograd, as torch's .data: eagerly a tensor sharing this one's
        buffer (a write through it is seen here, and records no gradient history); while tracing,
        `detach()`."""
        if self._value is not None:
            return self.detach()
        return Tensor._concrete(self._data, self._dtype)

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data must be set to a Tensor, got {type(value).__name__}\n  at {user_location()}")
        if self._value is not None or value._value is not None:
            raise TraceError(f"assigning .data of a traced tensor is not supported inside @flame.compile: use "
                             f"`with flame.no_grad(): x.copy_(value)`\n  at {user_location()}")
        self._data, self._dtype = value._data, value._dtype
        self._version += 1

    def zero_(self) -> Tensor:
        return self.copy_(0)

    def fill_(self, value) -> Tensor:
        return self.copy_(value)

    def __setitem__(self, key, value):
        """x[key] = value: a functional update that rebinds x (frontend/indexing.py)."""
        from flame.frontend.indexing import setitem

        setitem(self, key, value)

    # ---- dtype and device conversion ----------------------------------------------------------------
    def to(self, *args, dtype=None, device=None, non_blocking: bool = False, copy: bool = False) -> Tensor:
        """to(dtype), to(device), to(device, dtype), to(other) (its device and dtype), as in PyTorch.
        A device is "cpu" or "cuda" (see `device`)."""
        from flame.runtime.device import is_device

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

    def type(self, dtype=None):
        """The dtype's name without an argument; with one, a conversion (as to(dtype))."""
        return f"flame.{self.dtype.name}" if dtype is None else self.to(dtype)

    @property
    def device(self):
        """flame.device('cpu') for NumPy-backed tensors (the reference executor), cuda:N for CuPy ones."""
        from flame.runtime.device import device_of

        return device_of(self._data)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def cpu(self) -> Tensor:
        """This tensor on the CPU: itself on the reference executor; on a GPU run, a copy in host memory
        (to read values: .numpy() / .item() / .tolist(); ops need it back on the GPU: .cuda())."""
        return self._to_device("cpu")

    def cuda(self, device=None) -> Tensor:
        """This tensor on the GPU: itself when it is there; a host tensor is uploaded. Raises when this
        process runs on the reference executor (flame.set_device("cuda") first)."""
        return self._to_device("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def _to_device(self, device) -> Tensor:
        from flame.runtime.device import Device, executor, get_device

        want, here = Device(device), self.device
        if want.type == here.type:
            return self
        if self._value is not None or want.executor_name != get_device() and want.type == "cuda":
            raise FlameError(f".to({str(want)!r}): this process runs flame on the {get_device()} executor, whose "
                             f"tensors live on {here}; flame runs one executor per process (flame.set_device or "
                             f"FLAME_DEVICE choose it before tensors are made)\n  at {user_location()}")
        if want.type == "cpu":
            return Tensor._concrete(executor().to_numpy(self._data), self.dtype)
        return Tensor._concrete(executor().asarray(self._data), self.dtype)

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

    def __and__(self, o):
        return binary("logical_and", self, o)

    def __or__(self, o):
        return binary("logical_or", self, o)

    def __invert__(self):
        return apply("logical_not", self)

    def pow(self, o):
        return binary("pow", self, o)

    def maximum(self, o):
        return binary("maximum", self, o)

    def minimum(self, o):
        return binary("minimum", self, o)

    # ---- unary math (float ops promote integer inputs to f32, as torch does) ----------------------
    def _float_unary(self, name, **attrs):
        x = self if self.dtype.is_float else self.to(f32)
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
        return apply("sign", self)

    def floor(self):
        return apply("floor", self)

    def ceil(self):
        return apply("ceil", self)

    def round(self):
        return apply("round", self)

    def logical_not(self):
        return apply("logical_not", self)

    def square(self):
        return self * self

    # ---- reductions -------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        x = self.to(dtype) if dtype is not None else self
        if dtype is None and not x.dtype.is_float:  # PyTorch sums bool and integers in int64: no wrap
            x = x.to(i64)
        return apply("reduce_sum", x, axes=_axes(dim, self.ndim), keepdim=keepdim)

    def mean(self, dim=None, keepdim: bool = False):
        x = self if self.dtype.is_float else self.to(f32)
        return apply("reduce_mean", x, axes=_axes(dim, self.ndim), keepdim=keepdim)

    def amax(self, dim=None, keepdim: bool = False):
        return apply("reduce_max", self, axes=_axes(dim, self.ndim), keepdim=keepdim)

    def amin(self, dim=None, keepdim: bool = False):
        return apply("reduce_min", self, axes=_axes(dim, self.ndim), keepdim=keepdim)

    def max(self, dim: int | None = None, keepdim: bool = False):
        """max() of all elements; max(dim) -> (values, indices) as in PyTorch."""
        if dim is None:
            return self.amax()
        return MaxMin(self.amax(dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return self.amin()
        return MaxMin(self.amin(dim, keepdim), self.argmin(dim, keepdim))

    def argmax(self, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return apply("argmax", self.reshape(-1), axis=0, keepdim=False)
        if self.ndim == 0:
            dim_index("argmax", dim, 0)
            return apply("argmax", self.reshape(1), axis=0, keepdim=False)
        return apply("argmax", self, axis=dim_index("argmax", dim, self.ndim), keepdim=keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False):
        # an order-reversing map with no overflow: -x wraps INT_MIN onto itself, -1 - x maps the
        # integer range onto itself
        return (-self if self.dtype.is_float else -1 - self).argmax(dim, keepdim)

    def var(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *, correction: float | None = None):
        """The variance over dim (all by default) with torch's signature: the squared deviations' sum over
        n - correction (default 1, Bessel's correction; unbiased=False means 0)."""
        if unbiased is not None and correction is not None:
            raise TypeError("var: give unbiased or correction, not both")
        c = correction if correction is not None else (1 if unbiased is None else int(bool(unbiased)))
        axes = _axes(dim, self.ndim)
        n = int(np.prod([self.shape[a] for a in axes]))
        d = self - self.mean(axes, keepdim=True)
        s = (d * d).sum(axes, keepdim=keepdim)
        return s / (n - c) if n > c else s * float("nan")  # PyTorch: NaN, no divisor

    def std(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *, correction: float | None = None):
        """The square root of var (same arguments)."""
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    # ---- movement ---------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = list(_shape_arg(shape))
        if shape.count(-1) > 1:
            raise ShapeError(f"reshape {list(self.shape)} -> {shape}: only one -1 allowed")
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape {list(self.shape)} -> {shape}: cannot infer the -1 dimension")
            shape[shape.index(-1)] = self.numel() // known
        if tuple(shape) == self.shape:
            return self
        return apply("reshape", self, shape=shape)

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            dim_index("flatten", start_dim, 0), dim_index("flatten", end_dim, 0)
            return self.reshape(1)
        s, e = dim_index("flatten", start_dim, self.ndim), dim_index("flatten", end_dim, self.ndim)
        if s > e:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}\n  at {user_location()}")
        return self.reshape(*self.shape[:s], -1, *self.shape[e + 1:])

    def permute(self, *dims):
        perm = [dim_index("permute", d, self.ndim) for d in _shape_arg(dims)]
        if sorted(perm) != list(range(self.ndim)):
            raise ShapeError(f"permute: dims {list(_shape_arg(dims))} are not a permutation of the "
                             f"{self.ndim} dimensions of {list(self.shape)}\n  at {user_location()}")
        return apply("permute", self, perm=perm) if self.ndim else self

    def transpose(self, dim0: int, dim1: int):
        a, b = dim_index("transpose", dim0, self.ndim), dim_index("transpose", dim1, self.ndim)
        if self.ndim < 2:
            return self
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self if a == b else apply("permute", self, perm=perm)

    @property
    def T(self):  # noqa: N802
        return self if self.ndim < 2 else apply("permute", self, perm=list(range(self.ndim))[::-1])

    @property
    def mT(self):  # noqa: N802
        return self.transpose(-2, -1)

    def unsqueeze(self, dim: int):
        return apply("unsqueeze", self, axes=[dim_index("unsqueeze", dim, self.ndim + 1)])

    def squeeze(self, dim=None):
        axes = range(self.ndim) if dim is None else _axes(dim, self.ndim, "squeeze")
        axes = [a for a in axes if self.shape[a] == 1]  # squeezing a dim of another size is a no-op
        return apply("squeeze", self, axes=axes) if axes else self

    def broadcast_to(self, *shape):
        shape = _shape_arg(shape)
        return self if shape == self.shape else apply("broadcast_to", self, shape=shape)

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

    def flip(self, *dims):
        axes = _axes(_shape_arg(dims), self.ndim, "flip")
        return apply("flip", self, axes=list(axes)) if axes else self

    def triu(self, diagonal: int = 0):
        return apply("triu", self, k=diagonal)

    def tril(self, diagonal: int = 0):
        return apply("tril", self, k=diagonal)

    def gather(self, dim: int, index: Tensor):
        """self's elements at index along dim (frontend/index_ops.py: an index must be in [0, size))."""
        from flame.frontend.index_ops import gather

        return gather(self, dim, index)

    def index_select(self, dim: int, index: Tensor):
        """self's slices at index (1-D) along dim; an index must be in [0, size)."""
        from flame.frontend.index_ops import index_select

        return index_select(self, dim, index)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor):
        """self with src added at index along dim (duplicates add up)."""
        from flame.frontend.index_ops import scatter_add

        return scatter_add(self, dim, index, src)

    def clone(self):
        # x * 1, not x + 0: -0.0 + 0 is +0.0
        return self * 1 if self.dtype != boolean else self.logical_not().logical_not()

    def __getitem__(self, key):
        from flame.frontend.indexing import getitem

        return getitem(self, key)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- nn shortcuts -----------------------------------------------------------------------------
    def softmax(self, dim: int = -1):
        from flame.frontend.functional import softmax

        return softmax(self, dim)

    def log_softmax(self, dim: int = -1):
        from flame.frontend.functional import log_softmax

        return log_softmax(self, dim)


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, bool, np.number, np.bool_))


def result_type(*operands) -> DType:
    """torch.result_type over tensors and Python numbers: the dtype of the dimensioned tensors (by
    promote()); a 0-d tensor, then a Python number, counts only when of a higher category (bool <
    integer < float), a Python float then giving f32. So f16[n] * 2.0 is f16, f32[n] + f64[] is f32,
    i32[n] + 1 is i32 and i32[n] * 1.5 is f32."""
    groups: list[DType | None] = [None, None, None]  # dimensioned, 0-d, Python numbers
    for x in operands:
        if isinstance(x, Tensor):
            i, dt = (0 if x.ndim else 1), x.dtype
        else:
            i = 2
            dt = (boolean if isinstance(x, (bool, np.bool_)) else i64 if isinstance(x, (int, np.integer))
                  else f32)
        groups[i] = dt if groups[i] is None else promote(groups[i], dt)
    return _combine(groups[0], _combine(groups[1], groups[2]))


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    """PyTorch's combine_categories: `lower` (a 0-d tensor's or a number's dtype) matters only when
    its category is higher than `higher`'s."""
    if higher is None or lower is None:
        return higher or lower
    if higher.is_float:
        return higher
    if higher == boolean or lower.is_float:
        return promote(higher, lower)
    return higher


_BOOL_AS_LOGIC = {"add": "logical_or", "mul": "logical_and", "maximum": "logical_or", "minimum": "logical_and"}


def binary(name: str, a, b) -> Tensor:
    """A binary op with PyTorch's promotion (result_type); `div` is true division (integers go to
    f32); on two bool tensors + and max are logical or, * and min logical and, - raises, as in torch."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise FlameError(f"{name}: at least one operand must be a flame.Tensor")
    for x in (a, b):
        if not isinstance(x, Tensor) and not _is_scalar(x):
            if isinstance(x, np.ndarray):
                continue
            raise FlameError(f"{name}: unsupported operand of type {type(x).__name__}")
    a = Tensor(a) if isinstance(a, np.ndarray) else a
    b = Tensor(b) if isinstance(b, np.ndarray) else b
    dt = result_type(a, b)
    if dt == boolean and name in _BOOL_AS_LOGIC:
        a, b = (x if isinstance(x, Tensor) else full((), bool(x), boolean) for x in (a, b))
        return apply(_BOOL_AS_LOGIC[name], a, b)
    if dt == boolean and name == "sub":
        raise DTypeError(f"sub: subtraction of two bool tensors is not supported (as in PyTorch); a != b "
                         f"is their exclusive or\n  at {user_location()}")
    if name in ("div", "pow") and not dt.is_float:
        dt = f32
    a = a.to(dt) if isinstance(a, Tensor) else (float(a) if dt.is_float else a)
    b = b.to(dt) if isinstance(b, Tensor) else (float(b) if dt.is_float else b)
    return apply(name, a, b)


def _autocast_lowers(*dtypes: DType) -> bool:
    """Inside flame.autocast a matmul casts f16/bf16/f32 operands to one dtype (as torch.autocast)."""
    from flame.frontend import autocast

    return autocast.is_autocast_enabled() and all(d in (f16, bf16, f32) for d in dtypes)


def matmul(a, b) -> Tensor:
    """`a @ b` with NumPy's rules for 1-D operands (the IR's matmul wants rank >= 2). Both operands
    must have one dtype (PyTorch's rule: bf16 @ f32, or an integer or f64 input to an f32 Linear,
    raises flame.DTypeError naming the line, so an f64 batch never runs an f32 model in f64), except
    inside flame.autocast, which casts floating operands to its dtype."""
    a = a if isinstance(a, Tensor) else Tensor(a)
    b = b if isinstance(b, Tensor) else Tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul {a.dtype}{list(a.shape)} @ {b.dtype}{list(b.shape)}: both operands "
                         f"need at least one dimension\n  at {user_location()}")
    if a.dtype != b.dtype and not _autocast_lowers(a.dtype, b.dtype):  # PyTorch raises too: an f64 batch
        raise DTypeError(f"matmul {a.dtype}{list(a.shape)} @ {b.dtype}{list(b.shape)}: both operands must "
                         f"have the same dtype, as in PyTorch (convert one with .to({b.dtype.name!r}) or "
                         f".to({a.dtype.name!r}))\n  at {user_location()}")
    a1, b1 = a.ndim == 1, b.ndim == 1
    out = apply("matmul", a.unsqueeze(0) if a1 else a, b.unsqueeze(1) if b1 else b)
    if a1 and b1:
        return out.reshape(())
    if a1 or b1:
        out = out.squeeze(out.ndim - 2 if a1 else out.ndim - 1)
    return out


def full(shape, value, dtype=None) -> Tensor:
    from flame.frontend.creation import default_dtype_for

    dt = dtype_of(dtype) if dtype is not None else default_dtype_for(value)
    return apply("full", shape=tuple(shape), value=value, dtype=dt)
