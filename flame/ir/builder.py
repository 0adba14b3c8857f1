"""Builder: the one way ops get into a Graph. Used by tracing, the autodiff pass (VJP rules call
b.mul(g, y) ...) and every pass that rewrites graphs."""

from __future__ import annotations

from functools import partial
from typing import Any

from flame.errors import FlameError
from flame.ir import registry
from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Op, Value
from flame.ir.types import TensorType


def _with_loc(err: FlameError, loc: str | None) -> FlameError:
    if loc and "\n  at " not in str(err):
        return type(err)(f"{err}\n  at {loc}")
    return err


# (op, its inputs' shapes and dtypes, its attributes with their types) -> the result's type, for the ops
# whose shapes and attributes are plain (`_key`): a shape rule is a pure function of these, so an op
# alike to one typed before (a model's repeated blocks, an optimizer's update of each parameter) is
# typed by the answer it gave then
_INFERRED: dict[tuple, TensorType] = {}
_PLAIN = frozenset((int, float, bool, str, type(None)))


def infer(opdef: registry.OpDef, vals: tuple[Value, ...], attrs: dict[str, Any]) -> TensorType:
    """opdef's result type for inputs `vals` and normalized `attrs` (opdef.infer's answer)."""
    key = _key(opdef.name, vals, attrs)
    if key is None:
        return opdef.infer([v.type for v in vals], **attrs)
    out = _INFERRED.get(key)
    if out is None:
        out = opdef.infer([v.type for v in vals], **attrs)
        if len(_INFERRED) >= 16384:
            _INFERRED.clear()
        _INFERRED[key] = out
    return out


# (op, its given attributes with their types) -> opdef.normalize_attrs's answer, for attributes of plain
# values (`_given_key`): the constants tracing makes for Python numbers, alike in every block and update
_NORMALIZED: dict[tuple, dict[str, Any]] = {}


def normalized(opdef: registry.OpDef, attrs: dict[str, Any]) -> dict[str, Any]:
    """opdef.normalize_attrs(attrs), not to be changed by the caller (an Op copies its attributes)."""
    key = _given_key(opdef.name, attrs)
    if key is None:
        return opdef.normalize_attrs(attrs)
    out = _NORMALIZED.get(key)
    if out is None:
        out = opdef.normalize_attrs(attrs)
        if len(_NORMALIZED) >= 4096:
            _NORMALIZED.clear()
        _NORMALIZED[key] = out
    return out


def _given_key(name: str, attrs: dict[str, Any]) -> tuple | None:
    """The key of _NORMALIZED, or None where an attribute is not plain (`_attrs_key`)."""
    key: list = [name]
    return tuple(key) if _attrs_key(attrs, key) else None


def _key(name: str, vals: tuple[Value, ...], attrs: dict[str, Any]) -> tuple | None:
    """The key of _INFERRED, or None where a shape holds a symbolic size or an attribute is not plain."""
    key: list = [name]
    for v in vals:
        t = v.type
        for s in t.shape:
            if type(s) is not int:
                return None
        key.append(t.shape)
        key.append(t.dtype.name)
    return tuple(key) if _attrs_key(attrs, key) else None


def _attrs_key(attrs: dict[str, Any], key: list) -> bool:
    """Append each attribute's name, type and value to `key`; False where one is other than an int,
    bool, nonzero float (0.0 and -0.0 are equal keys), string, None, dtype or tuple of ints."""
    for k, a in attrs.items():
        ta = type(a)
        if ta is DType:
            a = a.name
        elif ta is tuple:
            for x in a:
                if type(x) is not int:
                    return False
        elif ta not in _PLAIN or (ta is float and a == 0):
            return False
        key.append(k)
        key.append(ta)
        key.append(a)
    return True


# (the value's type, the value, dtype) -> the attributes and type of the 0-d `full` constant emit makes of
# them: the Python numbers of a traced expression (an optimizer's 1 - beta in every update) are alike,
# and emit's generic steps cost several times an op's. 0.0 (whose sign the key would lose) and NaN are not kept
_CONSTS: dict[tuple, tuple[dict[str, Any], TensorType]] = {}
_NUMBERS = frozenset((int, float, bool))


class Builder:
    """Appends ops to `graph`. Python numbers given where a Value is expected become 0-d `full`
    constants of the dtype of the op's first non-bool tensor input. `loc` is stamped on every op."""

    def __init__(self, graph: Graph, loc: str | None = None):
        self.graph = graph
        self.loc = loc

    def emit(self, name: str, *inputs: Value | float | int | bool, **attrs: Any) -> Value:
        opdef = registry.get(name)
        vals = self._checked(opdef, inputs)
        try:
            attrs = normalized(opdef, attrs)
        except FlameError as e:
            raise _with_loc(e, self.loc) from None
        return self._append(opdef, vals, attrs)

    def emit_normalized(self, opdef: registry.OpDef, inputs: tuple, attrs: dict[str, Any]) -> Value:
        """emit(opdef.name, *inputs, **attrs) for attributes opdef.normalize_attrs already gave."""
        return self._append(opdef, self._checked(opdef, inputs), attrs)

    def _checked(self, opdef: registry.OpDef, inputs: tuple) -> tuple[Value, ...]:
        """inputs as Values (Python numbers made constants), after checking their count."""
        if opdef.arity >= 0 and len(inputs) != opdef.arity:
            raise _with_loc(FlameError(f"{opdef.name}: expected {opdef.arity} inputs, got {len(inputs)}"), self.loc)
        return self._values(inputs)

    def _append(self, opdef: registry.OpDef, vals: tuple[Value, ...], attrs: dict[str, Any]) -> Value:
        try:
            out_type = infer(opdef, vals, attrs)
        except FlameError as e:
            raise _with_loc(e, self.loc) from None
        op = Op(opdef.name, vals, attrs, out_type, self.loc)
        self.graph.ops.append(op)
        return op.out

    def _values(self, inputs: tuple) -> tuple[Value, ...]:
        for x in inputs:
            if type(x) is not Value:
                break
        else:
            return inputs
        like = None  # the first input of a dtype other than bool, else the first input
        for x in inputs:
            if isinstance(x, Value):
                if x.type.dtype.kind != "bool":
                    like = x
                    break
                like = like or x
        if like is None:
            raise FlameError("an op needs at least one tensor input to type its Python numbers")
        dtype = like.type.dtype
        return tuple([x if isinstance(x, Value) else self.const(x, dtype) for x in inputs])

    def const(self, value: float | int | bool, dtype: DType, shape: tuple[int, ...] = ()) -> Value:
        key = (type(value), value, dtype) if shape == () and type(value) in _NUMBERS and value == value else None
        known = _CONSTS.get(key) if key is not None and not (value == 0 and type(value) is float) else None
        if known is None:
            out = self.emit("full", shape=shape, value=value, dtype=dtype)
            if key is not None and not (value == 0 and type(value) is float):
                if len(_CONSTS) >= 4096:
                    _CONSTS.clear()
                _CONSTS[key] = (out.producer.attrs, out.type)
            return out
        op = Op("full", (), known[0], known[1], self.loc)  # (what emit makes of these again; Op copies attrs)
        self.graph.ops.append(op)
        return op.out

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


