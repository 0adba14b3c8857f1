"""Dead-code elimination."""

from __future__ import annotations

from flame.ir.graph import Graph, Value
from flame.ir.ops.collective import is_collective


def eliminate_dead_code(g: Graph) -> Graph:
    """Drop ops whose results reach no output.

    Before: any verified graph. After: the same function, in which every op has a path to an output.
    Graph inputs are never removed (the calling convention depends on them), even when nothing reads
    them; outputs, roles and aliases are unchanged. flame's ops have no side effects — random draws are
    pure functions of (seed, offset) — so liveness is the only criterion, except for collectives,
    which every rank must issue (ir/ops/collective.py) and so are always kept. g is not modified: a
    graph without dead ops (and without fusion groups, which the result does not keep) is returned
    as it is."""
    live: set[Value] = set(g.outputs)
    kept = []
    for op in reversed(g.ops):
        if op.out in live or is_collective(op):  # every rank must issue it, read or not
            kept.append(op)
            live.update(op.inputs)
    if len(kept) == len(g.ops) and g.groups is None:
        return g  # nothing to drop: no copy
    kept.reverse()
    pruned = Graph(g.name, list(g.inputs), list(g.roles), kept, list(g.outputs), dict(g.aliases))
    return pruned.copy()
