"""The driver shared by the simplification passes: copy a graph op by op into a fresh one, offering each
op to a rule that may replace its result by a value of the new graph. Also the constant helpers the
rules read (`full` is flame's only constant op: a scalar broadcast to a shape)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

import numpy as np

from flame.errors import FlameError
from flame.ir.builder import Builder
from flame.ir.graph import Graph, Op, Value, discard
from flame.ir.registry import is_fill

Rule = Callable[[Op, Builder], "Value | None"]


def rewrite(g: Graph, rule: Rule, checked: int = 0) -> Graph:
    """A new graph built from g. Each op, its inputs already renamed into the new graph, is offered to
    `rule(op, b)` before it is appended: None keeps it; a Value of the new graph (of exactly the op's
    type) replaces its result. The rule may emit ops with `b` first; they carry the op's `loc`, so
    errors and dumps still name the user's line. Inputs, roles, outputs and aliases carry over, and a
    replaced output stays an output (it may become a graph input, or the same value as another one).
    g itself is never modified; it is returned as it is when no rule replaced or emitted anything (the
    copy would be g op for op), so a pipeline sees that nothing changed. `checked`: the rule is known to
    leave g's first `checked` ops as they are (first_change): they are copied without asking it."""
    if checked >= len(g.ops) and g.groups is None:
        return g
    new = Graph(g.name)
    renamed: dict[Value, Value] = {v: new.add_input(v.type, r) for v, r in zip(g.inputs, g.roles)}
    b = Builder(new)
    ops, changed = new.ops, False
    for op in g.ops[:checked]:
        candidate = Op(op.name, tuple(map(renamed.__getitem__, op.inputs)), op.attrs, op.out.type, op.loc)
        ops.append(candidate)
        renamed[op.out] = candidate.out
    for op in g.ops[checked:]:
        candidate = Op(op.name, tuple(map(renamed.__getitem__, op.inputs)), op.attrs, op.out.type, op.loc)
        b.loc = op.loc
        before = len(ops)
        got = rule(candidate, b)
        if got is None:
            ops.append(candidate)
            got = candidate.out
            changed = changed or len(ops) != before + 1  # the rule emitted ops
        elif got.type != op.out.type:
            raise FlameError(
                f"internal error: a rewrite of {op.name} changed its type from {op.out.type} to {got.type}"
            )
        else:
            changed = True
            if got is not candidate.out:
                discard((candidate,))  # replaced: nothing reads it
        renamed[op.out] = got
    if not changed and g.groups is None:
        discard(ops)  # the copy, op for op g, is thrown away
        return g
    new.outputs = [renamed[v] for v in g.outputs]
    new.aliases = dict(g.aliases)
    return new


def first_change(g: Graph, rule: Rule) -> int:
    """The position of the first op of g that `rule` replaces or emits ops for (len(g.ops): none; 0 where g
    has fusion groups, which a rewrite never keeps), found without copying g: each of g's own ops is
    offered to the rule. While nothing has changed, rewrite offers copies of g's ops that read copies
    of their inputs, alike up to renaming, so a rule that answers from an op's structure alone (its
    name, attributes, types and its inputs' producers) and keeps no state across ops answers g's op
    as it would its copy. `rewrite(g, rule, checked=first_change(g, rule))` is rewrite(g, rule)."""
    if g.groups is not None:
        return 0
    scratch = Graph(g.name)
    b = Builder(scratch)
    for i, op in enumerate(g.ops):
        b.loc = op.loc
        if rule(op, b) is not None or scratch.ops:
            discard(scratch.ops)
            return i
    return len(g.ops)


def annotate_loc(loc: str | None, note: str) -> str:
    """loc with `note` appended to its first line (the one dumps and `flame explain` show), keeping
    loc's type (autodiff's BackwardLoc, a CheckpointLoc with its region) and any further lines."""
    first, *rest = (loc or "").split("\n", 1)
    new = type(loc or "")("\n".join([f"{first}  {note}".lstrip(), *rest]))
    if hasattr(loc, "__dict__"):
        new.__dict__.update(loc.__dict__)  # a CheckpointLoc's region
    return new


def full_value(v: Value) -> np.generic | None:
    """The element of a `full` constant, as stored (the attribute cast to the dtype, as the reference
    does), or None when v is not produced by `full`."""
    op = v.producer
    if not is_fill(op):
        return None
    value = op.attrs["value"]
    key = (type(value), struct.pack("<d", value) if isinstance(value, float) else
           value.tobytes() if isinstance(value, np.generic) else value, v.dtype)
    got = _ELEMENTS.get(key)
    if got is None:
        if len(_ELEMENTS) >= _ELEMENTS_KEPT:
            _ELEMENTS.clear()
        got = _ELEMENTS[key] = np.full((), value, dtype=v.dtype.np_dtype)[()]
    return got


# each `full` element made so far, by the attribute (its type and, for a float, its bits: -0.0 is not
# 0.0, a NaN's sign and payload count, 1.0 is not the int 1) and dtype: a model's few constants are
# asked about at every op that reads them
_ELEMENTS: dict[tuple, np.generic] = {}
_ELEMENTS_KEPT = 4096


def python_number(x: np.generic) -> bool | int | float:
    """A NumPy scalar as the Python number a `full` attribute holds (exact for every flame dtype)."""
    return x.item()


def same_bits(a: np.ndarray) -> bool:
    """Every element of `a` has the same bit pattern (so -0.0 and +0.0 differ; NaNs with the same
    payload agree). Empty arrays count as uniform."""
    if a.size == 0:
        return True
    bits = np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))
    return bool(np.all(bits == bits.flat[0]))


DECOMPOSE_ALL = "decomposition requested"  # the reason recorded when no `supported` check is given
Supported = Callable[[Op], str]  # op -> why the backend cannot run it as one call, or "" if it can
_logged: set[tuple[str, str]] = set()  # (pass, reason) pairs already logged in this process


def decompose(g: Graph, decompositions: dict[str, Callable[[Builder, Op], Value]], supported: Supported | None,
              name: str, what: str) -> Graph:
    """Replace each op of `decompositions` that `supported(op)` gives a non-empty reason for by what
    its decomposition builds (None: every such op, reason DECOMPOSE_ALL); the replacing ops carry the
    op's loc with `[name: reason]` appended, and each reason is logged once ("flame: {what}: reason").
    The skeleton of the legalization passes (decompose_attention, decompose_conv). g is returned as it
    is when no op needs decomposing."""
    def reason(op: Op) -> str:
        if op.name not in decompositions:
            return ""
        return DECOMPOSE_ALL if supported is None else supported(op)

    if not any(reason(op) for op in g.ops):
        return g  # the same graph: nothing to do (and no copy) for the common case

    def rule(op: Op, b: Builder) -> Value | None:
        why = reason(op)  # op is g's op with its inputs renamed: the same types and attributes
        if not why:
            return None
        if (name, why) not in _logged:
            _logged.add((name, why))
            logging.getLogger("flame").info("flame: %s: %s", what, why)
        b.loc = annotate_loc(op.loc, f"[{name}: {why}]")
        return decompositions[op.name](b, op)

    return rewrite(g, rule)
