"""A Trace records a Python function into a Graph. Concrete tensors the function touches (parameters
reached through closures, optimizer state, RNG seed/offset) are lifted to graph inputs with a role
(DESIGN.md §2); in-place updates rebind them and become aliased outputs (DESIGN.md §1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from flame.errors import FlameError, TraceError
from flame.frontend.context import user_location
from flame.frontend.hooks import run_grad_reducers
from flame.ir.builder import Builder
from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Value
from flame.ir.types import TensorType


@dataclass
class Binding:
    """Where a graph input's array comes from at each call: a call argument, a captured tensor, or a
    getter of a Python hyperparameter (a learning rate changed by a scheduler)."""

    kind: str  # "arg" | "tensor" | "grad" (the tensor's .grad at call time) | "getter"
    arg: int = -1
    tensor: object = None
    getter: Callable[[], float] | None = None
    dtype: DType | None = None
    pending: object = None  # "grad": the .grad seen while tracing, used by the call that traced
    checked: object = None  # "tensor": the buffer whose type the last call checked (unchanged: skip)
    cached: tuple | None = None  # "getter": (value, device array, executor) of the last call: no re-upload
    requires_grad: bool = False  # "tensor": its requires_grad when traced (freezing one re-traces)


@dataclass
class Trace:
    graph: Graph
    builder: Builder = field(init=False)
    bindings: list[Binding] = field(default_factory=list)
    current: dict[int, tuple[object, Value]] = field(default_factory=dict)  # id(tensor) -> (tensor, value)
    inputs_of: dict[int, Value] = field(default_factory=dict)
    grads: dict[int, object] = field(default_factory=dict)  # id(tensor) -> traced view of its .grad
    grad_at_lift: dict[int, tuple] = field(default_factory=dict)  # id -> (tensor, had a .grad when lifted)
    guards: list[tuple] = field(default_factory=list)  # (read, value when traced, what): see guard()

    def __post_init__(self):
        self.builder = Builder(self.graph)

    def add_arg(self, t, index: int):
        from flame.frontend.tensor import Tensor

        v = self.graph.add_input(TensorType(t.shape, t.dtype), "data")
        self.bindings.append(Binding("arg", arg=index))
        out = Tensor._traced(v, self)
        out.requires_grad = t.requires_grad
        # tracked like a captured tensor: an in-place update becomes an aliased output and
        # loss.backward() gives it a .grad, both handed to the caller's tensor after each call
        self.current[id(out)] = (out, v)
        self.inputs_of[id(out)] = v
        return out

    def value_of(self, t) -> Value:
        """The Value of tensor t in this trace, lifting a concrete tensor to a graph input."""
        if t._value is not None:
            if t._trace is not self:
                raise TraceError(f"a tensor from another trace was used here\n  at {user_location()}")
            return t._value
        hit = self.current.get(id(t))
        if hit is not None:
            return hit[1]
        role = t._role or ("param" if t.requires_grad else "const")
        v = self.graph.add_input(TensorType(t.shape, t.dtype), role)
        self.bindings.append(Binding("tensor", tensor=t, requires_grad=t.requires_grad))
        self.current[id(t)] = (t, v)
        self.inputs_of[id(t)] = v
        if t.requires_grad and (t._grad is None or t._grad._value is None):
            # the .grad the call starts with (a traced one was assigned by this trace: not a dependency)
            self.grad_at_lift[id(t)] = (t, t._grad is not None)
        return v

    def grad_of(self, t):
        """t.grad (concrete) read while tracing: a "state" input bound to t.grad at every call."""
        from flame.frontend.tensor import Tensor

        hit = self.grads.get(id(t))
        if hit is None:
            g = t._grad
            v = self.graph.add_input(TensorType(g.shape, g.dtype), "state")
            self.bindings.append(Binding("grad", tensor=t, pending=g))
            hit = self.grads[id(t)] = Tensor._traced(v, self)
        return hit

    def scalar(self, getter: Callable[[], float], dtype: DType):
        """A 0-d input whose value is read from getter() at every call (no re-trace on change)."""
        from flame.frontend.tensor import Tensor

        v = self.graph.add_input(TensorType((), dtype), "scalar")
        self.bindings.append(Binding("getter", getter=getter, dtype=dtype))
        return Tensor._traced(v, self)

    def assign(self, t, v: Value) -> None:
        """t.copy_(...) while tracing: t's value from here on is v."""
        if t._value is not None:
            t._value = v
            if id(t) in self.current:  # an argument of the traced function
                self.current[id(t)] = (t, v)
            return
        self.value_of(t)
        self.current[id(t)] = (t, v)

    def mutated(self) -> list[tuple[object, int, Value]]:
        """(tensor, input index, new value) for every argument or captured tensor updated in place."""
        out = []
        for key, (t, v) in self.current.items():
            v0 = self.inputs_of[key]
            if v is not v0:
                out.append((t, self.graph.inputs.index(v0), v))
        return out

    def backward(self, loss, gradient=None) -> None:
        """loss.backward() inside a trace: autodiff appends the backward ops; leaves get traced .grad."""
        from flame.frontend.tensor import Tensor
        from flame.passes.autodiff import autodiff

        leaves = [t for t, _ in self.current.values() if t.requires_grad and t.dtype.is_float]
        seed = self.value_of(gradient) if gradient is not None else None
        if seed is None and loss.numel() != 1:
            raise FlameError(f"backward() of a non-scalar {list(loss.shape)} tensor needs a gradient "
                             f"argument\n  at {user_location()}")
        self.builder.loc = user_location()
        grads = autodiff(self.graph, self.value_of(loss), [self.value_of(t) for t in leaves], seed)
        for t, gv in zip(leaves, grads):
            if gv is None:
                continue
            g = Tensor._traced(gv, self)
            t.grad = g if t.grad is None else t.grad + g
        run_grad_reducers(t for t, gv in zip(leaves, grads) if gv is not None)

    def guard(self, read: Callable[[], object], what: str) -> None:
        """Python state the traced graph depends on (read() now); a call when read() returns something
        else re-traces (or reuses a trace made with that value)."""
        self.guards.append((read, read(), what))

    def concrete_value(self, binding: Binding, args, executor):
        if binding.kind == "arg":
            return args[binding.arg]._data
        if binding.kind == "tensor":
            return binding.tensor._data
        if binding.kind == "grad":
            # the traced body may have reset .grad (zero_grad) already: the tracing call uses what it saw
            g = binding.pending if binding.pending is not None else binding.tensor._grad
            binding.pending = None
            return g._data
        value = binding.getter()
        if binding.cached is None or binding.cached[0] != value or binding.cached[2] is not executor:
            binding.cached = (value, executor.asarray(np.asarray(value, dtype=binding.dtype.np_dtype)), executor)
        return binding.cached[1]
