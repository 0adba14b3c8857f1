"""flame.nn.Parameter: a Tensor that a Module registers as trainable (requires_grad=True); flame.nn.Buffer,
a Tensor marked to be registered as a buffer when assigned to a Module's attribute; and the
placeholders a Lazy module holds until its first call tells the shapes (UninitializedParameter,
UninitializedBuffer, as torch.nn's)."""

from __future__ import annotations

import copy
import weakref
from typing import Any

from flame.errors import GradDTypeError, TraceError
from flame.frontend.context import user_location
from flame.frontend.creation import zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.tensor import Tensor


class Parameter(Tensor):
    """A trainable tensor. `Parameter(t)` shares t's buffer (no copy), as torch.nn.Parameter does.
    Inside @flame.compile a Parameter is lifted to a graph input with role `param`."""

    __slots__ = ()  # Tensor has __slots__; a subclass may add none (no per-instance __dict__)

    def __init__(self, data: Tensor | object = None, requires_grad: bool = True):
        if data is None:
            data = Tensor([])
        if isinstance(data, Tensor):
            if data.is_traced:
                raise TraceError("nn.Parameter needs a concrete tensor; it cannot wrap a tensor traced "
                                 f"inside @flame.compile (create parameters, and the modules holding them, before "
                                 f"compiling)\n  at {user_location()}")
            self._init(data._data, data.dtype, None, None)
        else:
            Tensor.__init__(self, data)
        if requires_grad and not self.dtype.is_float:
            raise GradDTypeError(
                f"only Tensors of floating point dtype can require gradients (this one is {self.dtype}), as in "
                f"PyTorch: pass requires_grad=False for an integer Parameter\n  at {user_location()}"
            )
        self.requires_grad = bool(requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict) -> Parameter:
        """A new Parameter holding a copy of the values, with the same requires_grad and no .grad, as
        torch.nn.Parameter's (copy.deepcopy of a model does not copy its gradients)."""
        if id(self) in memo:
            return memo[id(self)]
        if type(self) is not Parameter:  # a placeholder (UninitializedParameter): copied slot by slot
            return copy._reconstruct(self, memo, *self.__reduce_ex__(4))
        result = Parameter(self.detach().clone(), self.requires_grad)
        memo[id(self)] = result
        return result


_MARKED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> a tensor Buffer() marked
_PERSISTENT: dict[int, bool] = {}  # id -> its persistent flag, while it lives


class _BufferMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and _MARKED.get(id(obj)) is obj


class Buffer(metaclass=_BufferMeta):
    """torch.nn.Buffer: `self.mean = nn.Buffer(t)` in a Module registers `t` (detached) as a buffer, as
    register_buffer does (persistent=False keeps it out of state_dict). Buffer(t) returns a plain
    Tensor marked so; isinstance(x, nn.Buffer) is true for it."""

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True) -> Tensor:
        if data is None:
            data = Tensor([])
        t = data.detach().requires_grad_(data.requires_grad)
        _MARKED[id(t)] = t
        _PERSISTENT[id(t)] = bool(persistent)
        weakref.finalize(t, _PERSISTENT.pop, id(t), None)
        return t


def buffer_persistent(t: Tensor) -> bool:
    """The persistent flag Buffer(t, persistent=) gave t."""
    return _PERSISTENT.get(id(t), True)


class _Uninitialized:
    """What the placeholders share: an empty tensor of the dtype until `materialize(shape)` gives the
    same object zeros of that shape and turns it into its `cls_to_become` (so a module, or anything
    else holding it, sees the materialised tensor)."""

    __slots__ = ()
    cls_to_become: type = Tensor

    def materialize(self, shape: Any, device: Any = None, dtype: Any = None) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        data = zeros(*shape, dtype=dtype or self.dtype)
        requires_grad = self.requires_grad
        self._init(data._data, data.dtype, None, None)
        self.requires_grad = requires_grad
        self.__class__ = self.cls_to_become

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class UninitializedParameter(_Uninitialized, Parameter):
    """A Lazy module's parameter before its first call: no shape yet (torch.nn.UninitializedParameter).
    An optimizer refuses it (its state is made at construction): run a batch through the model first."""

    __slots__ = ()
    cls_to_become = Parameter

    def __init__(self, requires_grad: bool = True, device: Any = None, dtype: Any = None):
        Parameter.__init__(self, zeros(0, dtype=float_dtype(dtype)), requires_grad)


class UninitializedBuffer(_Uninitialized, Tensor):
    """A Lazy module's buffer (BatchNorm's running statistics) before its first call."""

    __slots__ = ()
    cls_to_become = Tensor

    def __init__(self, requires_grad: bool = False, device: Any = None, dtype: Any = None, persistent: bool = True):
        empty = zeros(0, dtype=float_dtype(dtype))
        self._init(empty._data, empty.dtype, None, None)
        self.requires_grad = requires_grad


def is_lazy(t: Any) -> bool:
    """Whether t is an UninitializedParameter or UninitializedBuffer (torch.nn.parameter.is_lazy)."""
    return isinstance(t, _Uninitialized)
