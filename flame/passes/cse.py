"""Common-subexpression elimination."""

from __future__ import annotations

import struct
from typing import Any

from flame.errors import FlameError
from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Op, Value
from flame.ir.registry import get
from flame.passes._rewrite import full_value


def attr_key(v: Any) -> Any:
    """A hashable key under which two attribute values are equal exactly when they mean the same thing:
    floats compare by their bits (so -0.0 != 0.0 and nan == nan), and 1, 1.0 and True stay distinct."""
    t = type(v)  # the common types first, by their exact type (a subclass takes the checks below)
    if t is int:
        return ("int", v)
    if t is str:
        return ("str", v)
    if t is tuple or t is list:
        return ("seq", tuple([attr_key(x) for x in v]))
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, (tuple, list)):
        return ("seq", tuple(attr_key(x) for x in v))
    if isinstance(v, DType):
        return ("dtype", v.name)
    return (type(v).__name__, v)


def _key(op: Op, ins: tuple[Value, ...]) -> tuple:
    """What op computes, with `ins` for its inputs: ops of equal keys compute the same value."""
    opdef = get(op.name)  # (the traits is_collective, is_fill and is_commutative read, looked up once)
    if opdef.library == "collective":
        return ("collective", id(op))  # every rank must issue each one: never merged
    if opdef.constant and not opdef.positional:  # full {value=1} and full {value=1.0} of one dtype: one element
        return (op.name, op.out.type, full_value(op.out).tobytes())
    if opdef.commutative:  # a op b == b op a bit for bit (the OpDef's `commutative` trait)
        ins = tuple(sorted(ins, key=id))
    attrs = op.attrs
    return (op.name, ins, tuple([(k, attr_key(attrs[k])) for k in sorted(attrs)]) if attrs else ())


def eliminate_common_subexpressions(g: Graph) -> Graph:
    """Merge ops that compute the same value: same op, same inputs (in either order for commutative
    ops), equal attributes. `full` constants of one type and stored element merge whatever their
    spelling. Identical random draws (same seed and offset values, shape, dtype) merge too, and that is
    correct: random_uniform / random_normal are pure functions of (seed, offset), so two such ops yield
    the same numbers in the unmerged graph as well.

    Before: any verified graph. After: the same function with no two ops of equal key; the first op
    of each class survives and keeps its `loc`. Outputs that merge become the same value twice. g is
    not modified; it is returned as it is when nothing merges (and it has no fusion groups, which the
    result does not keep)."""
    same: dict[Value, Value] = {}  # a merged op's result -> the earlier result it merges into
    seen: dict[tuple, Value] = {}
    for op in g.ops:  # keys over g's own values, inputs read through `same`
        ins = op.inputs
        if same:
            ins = tuple([same.get(v, v) for v in ins])
        key = _key(op, ins)
        first = seen.setdefault(key, op.out)
        if first is not op.out:
            if first.type != op.out.type:
                raise FlameError(
                    f"internal error: a rewrite of {op.name} changed its type from {op.out.type} to {first.type}"
                )
            same[op.out] = first
    if not same and g.groups is None:
        return g  # nothing to merge (the pipeline's later rounds): no copy of g to throw away
    new = Graph(g.name)
    renamed: dict[Value, Value] = {v: new.add_input(v.type, r) for v, r in zip(g.inputs, g.roles)}
    ops, rename = new.ops, renamed.__getitem__
    for op in g.ops:
        first = same.get(op.out)
        if first is not None:
            renamed[op.out] = renamed[first]
            continue
        copy = Op(op.name, tuple(map(rename, op.inputs)), op.attrs, op.out.type, op.loc)
        ops.append(copy)
        renamed[op.out] = copy.out
    new.outputs = [renamed[v] for v in g.outputs]
    new.aliases = dict(g.aliases)
    return new
