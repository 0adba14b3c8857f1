"""Common-subexpression elimination."""

from __future__ import annotations

import struct
from typing import Any

from flame.ir.builder import Builder
from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Op, Value
from flame.ir.registry import get
from flame.passes._rewrite import full_value, rewrite


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


def _key(op: Op) -> tuple:
    opdef = get(op.name)  # (the traits is_collective, is_fill and is_commutative read, looked up once)
    if opdef.library == "collective":
        return ("collective", id(op))  # every rank must issue each one: never merged
    if opdef.constant and not opdef.positional:  # full {value=1} and full {value=1.0} of one dtype: one element
        return (op.name, op.out.type, full_value(op.out).tobytes())
    ins = tuple(map(id, op.inputs))
    if opdef.commutative:  # a op b == b op a bit for bit (the OpDef's `commutative` trait)
        ins = tuple(sorted(ins))
    attrs = op.attrs
    return (op.name, ins, tuple([(k, attr_key(attrs[k])) for k in sorted(attrs)]) if attrs else ())


def eliminate_common_subexpressions(g: Graph) -> Graph:
    """Merge ops that compute the same value: same op, same inputs (in either order for commutative
    ops), equal attributes. `full` constants of one type and stored element merge whatever their
    spelling. Identical random draws (same seed and offset values, shape, dtype) merge too, and that is
    correct: random_uniform / random_normal are pure functions of (seed, offset), so two such ops yield
    the same numbers in the unmerged graph as well.

    Before: any verified graph. After: the same function with no two ops of equal key; the first op
    of each class survives and keeps its `loc`. Outputs that merge become the same value twice."""
    if g.groups is None and not _has_duplicate(g):
        return g  # nothing to merge (the pipeline's later rounds): no copy of g to throw away
    seen: dict[tuple, Value] = {}

    def merge(op: Op, b: Builder) -> Value | None:
        key = _key(op)
        if key in seen:
            return seen[key]
        seen[key] = op.out
        return None

    return rewrite(g, merge)


def _has_duplicate(g: Graph) -> bool:
    """Whether two ops of g have equal keys, found on g's own ops without copying them. rewrite offers
    the rule copies of g's ops whose inputs are renamed one to one until the first merge, so the first
    op it merges is the first op of g whose key an earlier op of g has."""
    seen: set[tuple] = set()
    for op in g.ops:
        key = _key(op)
        if key in seen:
            return True
        seen.add(key)
    return False
