"""flame.Tensor: PyTorch-named tensors. A Tensor is either concrete (holds an executor array) or
traced (holds an IR Value of the trace being recorded). This module holds a tensor's state and what
reads it without running an op (shape, dtype, values, .grad, device); every op goes through
dispatch.apply, so the methods that make one are written above it (tensor_core.py, tensor_ops.py,
tensor_math.py) and frontend/methods.py binds them onto Tensor."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from flame.errors import (
    ArgumentError,
    ArgumentTypeError,
    AutogradError,
    DimError,
    DTypeError,
    FlameError,
    GradDTypeError,
    OverflowValueError,
    ShapeError,
    TraceError,
)
from flame.frontend.context import current_trace, inference_enabled, user_location
from flame.frontend.default_dtype import get_default_dtype
from flame.frontend.size import Size
from flame.ir.dtypes import DType, bf16, boolean, dtype_of, i64, promote
from flame.ir.types import TensorType
from flame.runtime.device import Device, device_of, executor, get_device

_new_size = tuple.__new__  # (Size's checks skipped: a tensor's sizes are ints already)

_NON_LEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad attribute won't be "
    "populated during autograd.backward(). If you indeed want the .grad field to be populated for a non-leaf "
    "Tensor, use .retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure "
    "you access the leaf Tensor instead."
)


def int_arg(x):
    """An int argument given as a one-element integer tensor is the int it holds, as torch reads it
    (its __index__); anything else is returned as it is."""
    return x.__index__() if isinstance(x, Tensor) and x.numel() == 1 and x.dtype.is_int else x


def dim_index(op: str, dim: int, rank: int) -> int:
    """PyTorch's dim wrapping: dim in [-rank, rank) (a 0-d tensor takes 0 and -1), made non-negative;
    else a DimError (an IndexError, as in PyTorch) naming the user's line."""
    n = max(rank, 1)
    dim = int_arg(dim)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or not -n <= dim < n:
        raise DimError(f"{op}: axis {dim!r} is out of range for a rank-{rank} tensor (dimension out of range: "
                       f"expected to be in range of [{-n}, {n - 1}])\n  at {user_location()}")
    return int(dim) % n


def _axes(dim, rank: int, op: str = "reduce") -> tuple[int, ...]:
    if dim is None:
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, (int, np.integer)) or isinstance(dim, Tensor) and dim.ndim == 0 else tuple(dim)
    axes = sorted({dim_index(op, d, rank) for d in dims})
    return tuple(a for a in axes if a < rank)  # a 0-d tensor's dim 0 names no axis


def reduce_axes(dim, rank: int, op: str = "reduce") -> tuple[int, ...]:
    """The axes a reduction over `dim` reduces, as PyTorch: None or an empty tuple/list is every axis;
    an axis named twice raises (torch: "dim 0 appears multiple times in the list of dims")."""
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, (int, np.integer)) or isinstance(dim, Tensor) and dim.ndim == 0 else tuple(dim)
    wrapped = [dim_index(op, d, rank) for d in dims]
    if len(set(wrapped)) != len(wrapped):
        raise DimError(f"{op}: dim {next(d for d in wrapped if wrapped.count(d) > 1)} appears multiple times in the "
                       f"list of dims {list(dims)}\n  at {user_location()}")
    return tuple(a for a in sorted(wrapped) if a < rank)  # a 0-d tensor's dim 0 names no axis


def _shape_arg(shape) -> tuple[int, ...]:
    """A size given as ints or as one tuple/list of them; a float or a string in it is torch's TypeError
    (int() would truncate 2.5 to 2 without a word)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    for s in shape:
        if isinstance(s, (float, np.floating, str, bytes)):
            raise ArgumentTypeError(f"size must be a tuple of ints, but got {type(s).__name__} {s!r} in "
                                    f"{tuple(shape)}\n  at {user_location()}")
    return tuple(int(s) for s in shape)


def default_dtype_for(value: Any) -> DType:
    """The dtype of a tensor made from the number `value` without a dtype: bool, i64 for an integer,
    else the default floating dtype (flame.get_default_dtype), as PyTorch's."""
    if isinstance(value, (bool, np.bool_)):
        return boolean
    if isinstance(value, (int, np.integer)):
        return i64
    return get_default_dtype()


def check_int_range(values, dt: DType) -> None:
    """PyTorch's error for Python numbers that an integer dtype cannot hold (torch.tensor([300],
    dtype=torch.uint8) raises rather than wrapping; arrays and arithmetic wrap, as in PyTorch). As
    torch's c10::overflows: an unsigned dtype takes negative integers down to -max (u8: -1 is 255), and
    a float must lie in the range (NaN and infinities never do)."""
    info = np.iinfo(dt.np_dtype)
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf" or not arr.size:
        return
    low = -info.max if info.min == 0 and arr.dtype.kind in "iu" else info.min
    with np.errstate(invalid="ignore"):
        bad = not np.isfinite(arr).all() if arr.dtype.kind == "f" else False
        bad = bad or arr.min() < low or arr.max() > info.max
    if bad:
        raise DTypeError(f"value cannot be converted to type {dt} without overflow (it holds "
                         f"{info.min}..{info.max}), as in PyTorch\n  at {user_location()}")


_PY_NUMBER = frozenset((bool, int, float))


def inferred_dtype(data: Any) -> DType:
    """torch.tensor's dtype for data that is not an array: the promotion of its elements' dtypes, a
    Python float (and an empty list) counting as the default floating dtype, an int as i64, a NumPy
    scalar, array or tensor as its own dtype (so [np.float64(1.5), 2.0] is f64 and [np.int32(1),
    np.int8(2)] i32, as in PyTorch)."""
    if isinstance(data, (list, tuple)):
        kinds = set(map(type, data))
        if kinds <= _PY_NUMBER:  # the common case: plain Python numbers, one pass in C
            return get_default_dtype() if float in kinds or not kinds else i64 if int in kinds else boolean
        out = None
        for x in data:
            d = inferred_dtype(x)
            out = d if out is None else promote(out, d)
        return out or get_default_dtype()
    if type(data) in _PY_NUMBER:
        return default_dtype_for(data)
    if isinstance(data, Tensor):
        return data.dtype
    if isinstance(data, (np.ndarray, np.generic)):
        return dtype_of(data.dtype)
    return default_dtype_for(data)


def _ragged(data, dim: int = 0) -> str | None:
    """Where nested lists `data` stop being rectangular, in torch's words, or None."""
    if not isinstance(data, (list, tuple)) or not data:
        return None
    lengths = [len(x) if isinstance(x, (list, tuple)) else None for x in data]
    for n in lengths:
        if n != lengths[0]:
            got = "a number" if n is None else n
            want = "a number" if lengths[0] is None else f"sequence of length {lengths[0]}"
            return f"expected {want} at dim {dim + 1} (got {got})"
    return next((r for r in (_ragged(x, dim + 1) for x in data) if r), None)


def _asarray(data: Any) -> np.ndarray:
    """np.asarray(data); nested lists of different lengths are torch's ValueError, naming where."""
    try:
        return np.asarray(data)
    except ValueError as e:
        where = _ragged(data)
        if where is None:
            raise
        raise ArgumentError(f"tensor: {where} (nested lists must have one length per dimension)"
                            f"\n  at {user_location()}") from e


def _refuse_wide_ints(data: Any, arr: np.ndarray, dt: DType | None) -> None:
    """torch.tensor's ValueError for Python ints beyond int64 in data bound for an integer dtype (given,
    or inferred from ints), which NumPy holds as uint64, objects or rounded float64s and a cast would
    wrap: [2**63, 1] became -2**63. A float of that size is check_int_range's."""
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            if (np.abs(arr) < 2.0**63).all():
                return
    if not (dt if dt is not None else inferred_dtype(data)).is_int:
        return

    def leaves(x):
        if isinstance(x, (list, tuple)):
            for y in x:
                yield from leaves(y)
        else:
            yield x

    if any(type(x) is int and not -(2**63) <= x < 2**63 for x in leaves(data)):
        raise OverflowValueError(f"Overflow when unpacking long long: a Python int beyond int64 "
                                 f"(-2**63..2**63-1)\n  at {user_location()}")


def to_array(data: Any, dtype: Any = None, copy: bool = True):
    """Convert user data (lists, numbers, NumPy/CuPy/DLPack arrays, Tensors) to a device array.
    copy=False shares the caller's array where its dtype and device allow (as torch.as_tensor)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    dt = dtype_of(dtype) if dtype is not None else None
    if not isinstance(data, np.ndarray) and hasattr(data, "__cuda_array_interface__"):
        arr = data
    else:
        arr = _asarray(data)
        if not isinstance(data, np.ndarray) and arr.dtype.kind in "fuO":
            _refuse_wide_ints(data, arr, dt)
        if dt is None:
            if arr.dtype.kind in "fiu":
                dt = dtype_of(arr.dtype) if isinstance(data, np.ndarray) else inferred_dtype(data)
            elif arr.dtype.kind == "b":
                dt = boolean
            elif arr.dtype == bf16.np_dtype:  # ml_dtypes' bfloat16 has kind 'V'
                dt = bf16
            else:
                raise DTypeError(f"cannot make a tensor from data of dtype {arr.dtype} (invalid data type "
                                 f"{type(data).__name__!r})\n  at {user_location()}")
    if dt is None:
        dt = dtype_of(arr.dtype)
    elif dt.is_int and not isinstance(data, np.ndarray) and isinstance(arr, np.ndarray) and arr.size:
        check_int_range(arr, dt)
    ex = executor()
    out = ex.asarray(arr.astype(dt.np_dtype) if arr.dtype != dt.np_dtype else arr)
    if copy and (out is arr or (isinstance(out, np.ndarray) and np.may_share_memory(out, arr))):
        out = out.copy()  # flame.tensor never aliases the caller's array (a later a[0] = 42 must not show)
    return out, dt


class Tensor:
    """A tensor. Concrete tensors live on the current device (NumPy or CuPy arrays); traced tensors
    exist while @flame.compile records a function. Its methods beyond its state: frontend/methods.py."""

    __slots__ = ("_data", "_dtype", "_value", "_trace", "_requires_grad", "_grad", "_node", "_vc",
                 "_role", "_past", "_base", "_chain", "_seen", "_hooks", "_retains_grad", "_post_hooks",
                 "_inference", "_readers", "__weakref__")
    __array_priority__ = 1000  # numpy scalars defer to Tensor's reflected operators

    def __init__(self, data: Any = None, dtype: Any = None, requires_grad: bool = False):
        arr, dt = to_array(data, dtype)
        self._init(arr, dt, None, None)
        self.requires_grad_(requires_grad)

    def _init(self, data, dtype, value, trace):
        self._data, self._dtype, self._value, self._trace = data, dtype, value, trace
        self._requires_grad, self._grad, self._node, self._role = False, None, None, None
        self._vc = [0]  # the version counter, shared with the tensor's views (frontend/views.py)
        self._past = None  # {version: the tensor as it was then}, left by in-place writes (indexing.stand_in)
        # a view (frontend/views.py): the tensor whose storage it shares (never itself a view), the view
        # ops from there ((op, attrs, shape) each), and that tensor's version when this one was derived
        self._base, self._chain, self._seen = None, (), 0
        self._hooks, self._retains_grad = None, False  # gradient hooks, retain_grad() (frontend/hooks.py)
        self._post_hooks = None  # post-accumulate-grad hooks (frontend/hooks.py)
        self._inference = inference_enabled.get()  # made inside inference_mode (is_inference)
        self._readers = None  # a leaf's: the nodes that read its buffer (dispatch.note_readers), weakly

    @classmethod
    def _concrete(cls, data, dtype: DType) -> Tensor:
        t = object.__new__(cls)
        t._init(data, dtype, None, None)
        return t

    @classmethod
    def _traced(cls, value, trace) -> Tensor:
        t = object.__new__(cls)  # (what _init sets, written out: a traced op makes one of these each)
        t._data, t._dtype, t._value, t._trace = None, value.type.dtype, value, trace
        t._requires_grad, t._grad, t._node, t._role = False, None, None, None
        t._vc, t._past, t._base, t._chain, t._seen = [0], None, None, (), 0
        t._hooks, t._retains_grad, t._post_hooks = None, False, None
        t._inference, t._readers = inference_enabled.get(), None
        return t

    # ---- metadata -------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        """torch's x.shape: a flame.Size, the tuple of the dimensions' sizes."""
        return _new_size(Size, self._value.type.shape if self._value is not None else self._data.shape)

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
        return TensorType(self.shape, self.dtype)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n if n < 2**63 else int(np.prod(self.shape, dtype=np.int64))  # (NumPy's int64 product past it)

    @property
    def _version(self) -> int:
        """How many in-place writes the tensor's storage has seen (through it or any view of it)."""
        return self._vc[0]

    @_version.setter
    def _version(self, value: int) -> None:
        self._vc[0] = value

    @property
    def is_traced(self) -> bool:
        return self._value is not None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ---- reading values ---------------------------------------------------------------------------
    def _need_concrete(self, what: str) -> None:
        if self._value is not None and current_trace.get() is None:
            raise TraceError(f"{what}: this tensor was traced inside @flame.compile and outlived the trace (kept "
                             f"by a hook or a list?); it holds no values. Return it from the compiled function to "
                             f"get its value at each call\n  at {user_location()}")
        if self._value is not None:
            raise TraceError(f"{what} reads a tensor's value, which does not exist while tracing "
                             f"@flame.compile (Python control flow runs at trace time; use "
                             f"flame.where for data-dependent choices)\n  at {user_location()}")

    def numpy(self) -> np.ndarray:
        self._need_concrete(".numpy()")
        return executor().to_numpy(self._data, self.dtype)

    def item(self) -> float | int | bool:
        self._need_concrete(".item()")
        if self.numel() != 1:
            raise ShapeError(f".item(): a Tensor with {self.numel()} elements cannot be converted to Scalar (it "
                             f"needs one element, got shape {list(self.shape)})\n  at {user_location()}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        self._need_concrete("bool(tensor)")
        if self.numel() != 1:
            raise ShapeError(f"bool(tensor): Boolean value of Tensor with more than one value is ambiguous (shape "
                             f"{list(self.shape)}; use .any() or .all())\n  at {user_location()}")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        """An integer (or bool) tensor of one element as a Python index (a list's subscript, range's
        bound), as torch's; other tensors raise TypeError, as torch's."""
        if self.dtype.is_float or self.numel() != 1:
            raise TypeError(f"only integer tensors of a single element can be converted to an index (got "
                            f"{self.dtype}{list(self.shape)})\n  at {user_location()}")
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
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(", **_PRINT_OPTIONS)
        return f"tensor({body}, dtype={self.dtype.name}{grad})"

    def __format__(self, spec: str) -> str:
        """A concrete 0-d tensor formats as its Python number (f"{loss:.4f}"), as torch's; any other
        tensor as object does (its repr for an empty spec)."""
        if self._value is None and self.ndim == 0 and type(self) is Tensor:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    # ---- autograd ---------------------------------------------------------------------------------
    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient. Inside @flame.compile, a concrete tensor's .grad is part of the
        traced program: the body's first read (before it assigns .grad) becomes a graph input bound to
        "this tensor's .grad at call time" (or, when it was None, a guard that it still is), and what
        the body assigns (zero_grad(), backward()) is handed to the tensor after each call. An argument's
        .grad, read before the body set it, is the caller's .grad in the same way."""
        if self._value is None:
            trace = current_trace.get()
            if trace is not None:
                return trace.read_grad(self)
            if self._grad is None and self._node is not None and self.requires_grad and not self._retains_grad:
                warnings.warn(_NON_LEAF_GRAD, UserWarning, stacklevel=2)
        elif self._trace is not None and id(self) in self._trace.arg_grad_unread:
            return self._trace.read_arg_grad(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            _check_grad(self, value)
        if self._value is None:
            trace = current_trace.get()
            if trace is not None:
                trace.write_grad(self, value)
                return
        elif self._trace is not None:
            self._trace.arg_grad_unread.pop(id(self), None)  # an argument's: set before read, the caller's is not read
        self._grad = value

    @property
    def requires_grad(self) -> bool:
        """Whether autograd records operations on this tensor (a leaf's flag to set; a computed
        tensor's says whether it has a gradient history)."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, requires_grad: bool) -> None:
        if not requires_grad and self._requires_grad and self._node is not None and self._value is None:
            raise AutogradError(
                "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach()"
                f"\n  at {user_location()}"
            )
        if requires_grad != self._requires_grad and self._value is None and (trace := current_trace.get()) is not None:
            trace.write_requires_grad(self)  # a compiled call sets it again as the body did
        elif requires_grad and not self._requires_grad and self._trace is not None and \
                id(self) not in self._trace.current and not self._trace.requires_grad(self):
            self._trace.made_leaves[id(self)] = self  # a leaf made while tracing (not an argument; no history)
        self._requires_grad = requires_grad

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set requires_grad in place and return self, as torch's (floating-point tensors only)."""
        if requires_grad and not self.dtype.is_float:
            raise GradDTypeError(
                f"only Tensors of floating point dtype can require gradients (this one is "
                f"{self.dtype}), as in PyTorch\n  at {user_location()}"
            )
        self.requires_grad = bool(requires_grad)
        return self

    # ---- device -----------------------------------------------------------------------------------
    @property
    def device(self):
        """flame.device('cpu') for NumPy-backed tensors (the reference executor), cuda:N for CuPy ones."""
        return device_of(self._data)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def cpu(self) -> Tensor:
        """This tensor on the CPU: itself on the reference executor; on a GPU run, a copy in host memory
        (to read values: .numpy() / .item() / .tolist(); ops need it back on the GPU: .cuda())."""
        return self._to_device("cpu")

    def cuda(self, device=None) -> Tensor:
        """This tensor on the GPU: itself when it is there; a host tensor is uploaded. Raises when this
        process runs on the reference executor (flame.set_device("cuda") first)."""
        return self._to_device("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def _to_device(self, device) -> Tensor:
        want, here = Device(device), self.device
        if want.type == here.type:
            return self
        if self._value is not None or want.executor_name != get_device() and want.type == "cuda":
            raise FlameError(f".to({str(want)!r}): this process runs flame on the {get_device()} executor, whose "
                             f"tensors live on {here}; flame runs one executor per process (flame.set_device or "
                             f"FLAME_DEVICE choose it before tensors are made)\n  at {user_location()}")
        if want.type == "cpu":
            return Tensor._concrete(executor().to_numpy(self._data, self.dtype), self.dtype)
        return Tensor._concrete(executor().asarray(self._data), self.dtype)


def _check_grad(t: Tensor, value) -> None:
    """torch's checks of `t.grad = value`: a tensor of t's dtype and shape."""
    if not isinstance(value, Tensor):
        raise ArgumentTypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(value).__name__}\n  at {user_location()}")
    if value.dtype != t.dtype:
        raise AutogradError(f"attempting to assign a gradient with dtype '{value.dtype}' to a tensor with dtype "
                            f"'{t.dtype}'. Please ensure that the gradient and the tensor have the same dtype"
                            f"\n  at {user_location()}")
    if value.shape != t.shape:
        raise AutogradError(f"attempting to assign a gradient of size '{list(value.shape)}' to a tensor of size "
                            f"'{list(t.shape)}'. Please ensure that the gradient and the tensor are the same size"
                            f"\n  at {user_location()}")


_PRINT_OPTIONS: dict = {}  # numpy.array2string's options a Tensor's repr uses (set_printoptions)
_PROFILES = {"default": dict(precision=4, threshold=1000, edgeitems=3, max_line_width=80),
             "short": dict(precision=2, threshold=1000, edgeitems=2, max_line_width=80),
             "full": dict(precision=4, threshold=sys.maxsize, edgeitems=3, max_line_width=80)}


def set_printoptions(precision: int | None = None, threshold: float | None = None, edgeitems: int | None = None,
                     linewidth: int | None = None, profile: str | None = None, sci_mode: bool | None = None) -> None:
    """How a tensor prints, as torch.set_printoptions: `profile` ("default", "short", "full") sets the
    four sizes first, then the ones given override it; sci_mode True prints floats in scientific
    notation, False never, None as NumPy chooses. Until it is called, tensors print as NumPy prints."""
    _PRINT_OPTIONS["floatmode"] = "fixed"  # torch's: every float with `precision` digits
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be one of {sorted(_PROFILES)}, got {profile!r}")
        _PRINT_OPTIONS.update(_PROFILES[profile])
    given = dict(precision=precision, threshold=threshold, edgeitems=edgeitems, max_line_width=linewidth)
    for name, value in given.items():
        if value is not None:
            _PRINT_OPTIONS[name] = sys.maxsize if name == "threshold" and value == float("inf") else int(value)
    if sci_mode is not None:
        _PRINT_OPTIONS.pop("suppress_small", None)
        _PRINT_OPTIONS.pop("formatter", None)
        if sci_mode:
            digits = _PRINT_OPTIONS.get("precision", 4)
            _PRINT_OPTIONS["formatter"] = {"float_kind": lambda x: f"{x:.{digits}e}"}
        else:
            _PRINT_OPTIONS["suppress_small"] = True
