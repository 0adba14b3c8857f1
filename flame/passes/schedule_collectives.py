"""Move each collective to right after the last producer of its inputs (ARCHITECTURE.md "Collectives are ops"),
so that a
gradient bucket's all-reduce is issued as soon as the bucket's gradients are final — while the rest
of the backward still runs — instead of where it was traced (after the whole backward). The fusion
pass keeps this order (it orders kernels by their first op among those ready), and the plan builder
then lets the steps up to the first reader of the result overlap the transfer (plan/build.py
overlap_streams)."""

from __future__ import annotations

from flame.ir.graph import Graph
from flame.ir.ops.collective import is_collective
from flame.ir.registry import REGISTRY


def _cheap(op) -> bool:
    """A constant or a view: traced with the collective (a bucket's zero padding, a reshape), moved
    along with it rather than left where it was traced (which would hold the collective back)."""
    return op is not None and (not op.inputs or REGISTRY[op.name].view is not None)


def schedule_collectives(g: Graph) -> Graph:
    """Reorder g's ops: every collective as early as its inputs allow, but never before an earlier
    collective (every rank must issue them in the same order, and the traced order is the same on
    every rank); constants and views that only collectives read move along with them.
    Before: a verified graph. After: the same ops, values and outputs in a topological order,
    collectives in their original relative order. g is not modified."""
    coll = [op for op in g.ops if is_collective(op)]
    if not coll:
        return g
    users, is_coll = g.users(), set(coll)
    feeders = {c: [v.producer for v in c.inputs if _cheap(v.producer) and set(users[v]) <= is_coll] for c in coll}
    placed: set = {None}
    order, nxt = [], 0

    def ready(c) -> bool:
        def available(v) -> bool:
            p = v.producer
            return p in placed or (p in feeders[c] and all(w.producer in placed for w in p.inputs))

        return all(available(v) for v in c.inputs)

    def release() -> int:
        n = nxt
        while n < len(coll) and ready(coll[n]):
            for f in feeders[coll[n]]:
                if f not in placed:
                    order.append(f)
                    placed.add(f)
            order.append(coll[n])
            placed.add(coll[n])
            n += 1
        return n

    nxt = release()
    pending = set(coll)
    for op in g.ops:
        if op in pending or op in placed:
            continue
        order.append(op)
        placed.add(op)
        nxt = release()
    g = Graph(g.name, list(g.inputs), list(g.roles), order, list(g.outputs), dict(g.aliases))
    return g.copy()
