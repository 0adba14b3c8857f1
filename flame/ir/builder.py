"""Builder: the one way ops get into a Graph. Used by tracing, the autodiff pass (VJP rules call
b.mul(g, y) ...) and every pass that rewrites graphs."""

from __future__ import annotations

from functools import partial
from typing import Any

from flame.errors import FlameError
from flame.ir import registry
from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Op, Value


def _with_loc(err: FlameError, loc: str | None) -> FlameError:
    if loc and "\n  at " not in str(err):
        return type(err)(f"{err}\n  at {loc}")
    return err


class Builder:
    """Appends ops to `graph`. Python numbers given where a Value is expected become 0-d `full`
    constants of the dtype of the op's first non-bool tensor input. `loc` is stamped on every op."""

    def __init__(self, graph: Graph, loc: str | None = None):
        self.graph = graph
        self.loc = loc

    def emit(self, name: str, *inputs: Value | float | int | bool, **attrs: Any) -> Value:
        opdef = registry.get(name)
        loc = self.loc
        if opdef.arity >= 0 and len(inputs) != opdef.arity:
            raise _with_loc(FlameError(f"{name}: expected {opdef.arity} inputs, got {len(inputs)}"), loc)
        vals = self._values(inputs)
        try:
            attrs = opdef.normalize_attrs(attrs)
            out_type = opdef.infer([v.type for v in vals], **attrs)
        except FlameError as e:
            raise _with_loc(e, loc) from None
        op = Op(name, tuple(vals), attrs, out_type, loc)
        self.graph.ops.append(op)
        return op.out

    def _values(self, inputs: tuple) -> list[Value]:
        if all(isinstance(x, Value) for x in inputs):
            return list(inputs)
        tensors = [x for x in inputs if isinstance(x, Value)]
        like = next((v for v in tensors if v.dtype.kind != "bool"), tensors[0] if tensors else None)
        if like is None:
            raise FlameError("an op needs at least one tensor input to type its Python numbers")
        return [x if isinstance(x, Value) else self.const(x, like.dtype) for x in inputs]

    def const(self, value: float | int | bool, dtype: DType, shape: tuple[int, ...] = ()) -> Value:
        return self.emit("full", shape=shape, value=value, dtype=dtype)

    def zeros_like(self, v: Value) -> Value:
        return self.const(0, v.dtype, v.shape)

    def sum_to(self, v: Value, shape: tuple[int, ...]) -> Value:
        """Sum a broadcast result back to `shape` (the inverse of NumPy broadcasting)."""
        shape = tuple(shape)
        if v.shape == shape:
            return v
        lead = len(v.shape) - len(shape)
        axes = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and v.shape[lead + i] != 1]
        if axes:
            v = self.emit("reduce_sum", v, axes=axes, keepdim=True)
        return self.emit("reshape", v, shape=shape) if v.shape != shape else v

    def expand_reduced(self, g: Value, in_shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> Value:
        """Broadcast a reduction's result (or its gradient) back to the reduced input's shape."""
        if not keepdim:
            kept = tuple(1 if i in axes else s for i, s in enumerate(in_shape))
            g = self.emit("reshape", g, shape=kept)
        return self.emit("broadcast_to", g, shape=in_shape) if g.shape != tuple(in_shape) else g

    def transpose_last(self, v: Value) -> Value:
        perm = list(range(v.type.rank))
        perm[-2], perm[-1] = perm[-1], perm[-2]
        return self.emit("permute", v, perm=perm)

    def __getattr__(self, name: str):
        if name in registry.REGISTRY:
            return partial(self.emit, name)
        raise AttributeError(name)


