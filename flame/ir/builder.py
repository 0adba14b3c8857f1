"""Builder: the one way ops get into a Graph. Used by tracing, the autodiff pass (VJP rules call
b.mul(g, y) ...) and every pass that rewrites graphs."""

from __future__ import annotations

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


_FROM_ATTRS: Any = object()  # (infer's attrs_key when the caller has none: work it out from the attributes)


def infer(opdef: registry.OpDef, vals: tuple[Value, ...], attrs: dict[str, Any], attrs_key=_FROM_ATTRS) -> TensorType:
    """opdef's result type for inputs `vals` and normalized `attrs` (opdef.infer's answer). attrs_key:
    what `attrs_key_of(attrs)` gives, where the caller has it (normalized_keyed)."""
    key = _key(opdef.name, vals, attrs, attrs_key)
    if key is None:
        return opdef.infer([v.type for v in vals], **attrs)
    out = _INFERRED.get(key)
    if out is None:
        out = opdef.infer([v.type for v in vals], **attrs)
        if all(type(s) is int for s in out.shape):
            str(out)  # (its text, which a static type keeps: the key part of the ops that read a value of it)
        if len(_INFERRED) >= 16384:
            _INFERRED.clear()
        _INFERRED[key] = out
    return out


# (op, its given attributes with their types) -> opdef.normalize_attrs's answer and its attrs_key_of, for
# attributes of plain values (`_given_key`): the constants tracing makes for Python numbers, alike in
# every block and update
_NORMALIZED: dict[tuple, tuple[dict[str, Any], tuple | None]] = {}


def normalized(opdef: registry.OpDef, attrs: dict[str, Any]) -> dict[str, Any]:
    """opdef.normalize_attrs(attrs), not to be changed by the caller (an Op copies its attributes)."""
    return normalized_keyed(opdef, attrs)[0]


def normalized_keyed(opdef: registry.OpDef, attrs: dict[str, Any]) -> tuple[dict[str, Any], tuple | None]:
    """(normalized(opdef, attrs), attrs_key_of that): infer takes the second instead of working it out."""
    key = _given_key(opdef.name, attrs)
    if key is None:
        out = opdef.normalize_attrs(attrs)
        return out, attrs_key_of(out)
    hit = _NORMALIZED.get(key)
    if hit is None:
        out = opdef.normalize_attrs(attrs)
        hit = (out, attrs_key_of(out))
        if len(_NORMALIZED) >= 4096:
            _NORMALIZED.clear()
        _NORMALIZED[key] = hit
    return hit


def attrs_key_of(attrs: dict[str, Any]) -> tuple | None:
    """The part of infer's cache key that normalized attributes `attrs` make (`_attrs_key`), or None."""
    key: list = []
    return tuple(key) if _attrs_key(attrs, key) else None


def _given_key(name: str, attrs: dict[str, Any]) -> tuple | None:
    """The key of _NORMALIZED, or None where an attribute is not plain (`_attrs_key`)."""
    key: list = [name]
    return tuple(key) if _attrs_key(attrs, key) else None


def _key(name: str, vals: tuple[Value, ...], attrs: dict[str, Any], attrs_key=_FROM_ATTRS) -> tuple | None:
    """The key of _INFERRED, or None where a shape holds a symbolic size or an attribute is not plain.
    An input's type enters as its text where it has one (`f32[128,256]`, which a static type keeps once
    made, and whose hash Python keeps with the string), not as its shape and dtype hashed for every op."""
    key: list = [name]
    for v in vals:
        t = v.type
        text = t.__dict__.get("_text")
        if text is None:  # (a type whose text was never made: its shape and dtype)
            for s in t.shape:
                if type(s) is not int:
                    return None
            key.append(t.shape)
            key.append(t.dtype.name)
        else:
            key.append(text)
    if attrs_key is not _FROM_ATTRS:
        if attrs_key is None:
            return None
        key.extend(attrs_key)
        return tuple(key)
    return tuple(key) if not attrs or _attrs_key(attrs, key) else None


def _attrs_key(attrs: dict[str, Any], key: list) -> bool:
    """Append each attribute's name, type and value to `key`; False where one is other than an int,
    bool, nonzero float (0.0 and -0.0 are equal keys), string, None, dtype, or tuple or list of ints."""
    for k, a in attrs.items():
        ta = type(a)
        if ta is DType:
            a = a.name
        elif ta is tuple or ta is list:  # (a list as the tuple of its items: the type is in the key too)
            for x in a:
                if type(x) is not int:
                    return False
            if ta is list:
                a = tuple(a)
        elif ta not in _PLAIN or (ta is float and a == 0):
            return False
        key.append(k)
        key.append(ta)
        key.append(a)
    return True


# (the value's type, the value, dtype's name) -> the attributes and type of the 0-d `full` constant emit makes of
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
        opdef = registry.REGISTRY.get(name) or registry.get(name)
        vals = self._checked(opdef, inputs)
        attrs_key = ()
        if attrs or opdef.attrs:  # (an op without attributes, given none: nothing to normalize)
            try:
                attrs, attrs_key = normalized_keyed(opdef, attrs)
            except FlameError as e:
                raise _with_loc(e, self.loc) from None
        return self.emit_normalized(opdef, vals, attrs, attrs_key)

    def emit_normalized(self, opdef: registry.OpDef, inputs: tuple, attrs: dict[str, Any],
                        attrs_key=_FROM_ATTRS) -> Value:
        """emit(opdef.name, *inputs, **attrs) for attributes opdef.normalize_attrs already gave (with
        attrs_key: what normalized_keyed gave with them)."""
        if opdef.arity >= 0 and len(inputs) != opdef.arity:
            return self._append(opdef, self._checked(opdef, inputs), attrs)  # (raises)
        for x in inputs:
            if type(x) is not Value:
                inputs = self._values(inputs)
                break
        try:
            out_type = infer(opdef, inputs, attrs, attrs_key)
        except FlameError as e:
            raise _with_loc(e, self.loc) from None
        op = Op(opdef.name, inputs, attrs, out_type, self.loc)
        self.graph.ops.append(op)
        return op.out

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
        key = (type(value), value, dtype.name) if (
            shape == () and type(value) in _NUMBERS and value == value and type(dtype) is DType) else None
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
            setattr(Builder, name, _emitter(name))  # (a method from now on: no __getattr__, no partial per use)
            return getattr(self, name)
        raise AttributeError(name)


def _emitter(name: str):
    """Builder's method `name`: emit(name, ...)."""

    def emit(self, *inputs: Value | float | int | bool, **attrs: Any) -> Value:
        return self.emit(name, *inputs, **attrs)

    emit.__name__ = name
    return emit


