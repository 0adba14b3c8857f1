"""Move each collective to right after the last producer of its inputs (DESIGN.md §12), so that a
gradient bucket's all-reduce is issued as soon as the bucket's gradients are final — while the rest
of the backward still runs — instead of where it was traced (after the whole backward). The fusion
pass keeps this order (it orders kernels by their first op among those ready), and the plan builder
then lets the steps up to the first reader of the result overlap the transfer (plan/build.py
overlap_collectives)."""

from __future__ import annotations

from flame.ir.graph import Graph
from flame.ir.registry import REGISTRY


def schedule_collectives(g: Graph) -> Graph:
    """Reorder g's ops: every collective op directly after the last op producing one of its inputs
    (graph inputs only: first), collectives keeping their relative order.
    Before: a verified graph. After: the same ops, values and outputs in a topological order where
    no non-collective op sits between a collective and its latest producer. g is not modified."""
    coll = [op for op in g.ops if REGISTRY[op.name].library == "collective"]
    if not coll:
        return g
    waiting = set(coll)
    placed: set = {None}
    order = []

    def release() -> None:
        for op in coll:
            if op in waiting and all(v.producer in placed for v in op.inputs):
                waiting.discard(op)
                order.append(op)
                placed.add(op)
                release()
                return

    release()
    for op in g.ops:
        if op in waiting:
            continue
        if op not in placed:
            order.append(op)
            placed.add(op)
        release()
    g = Graph(g.name, list(g.inputs), list(g.roles), order, list(g.outputs), dict(g.aliases))
    return g.copy()
