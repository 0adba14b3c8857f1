"""Memory-first scheduling of a fused graph: the kernel order that keeps the fewest bytes live, for
plans fitted to a memory budget (the compiler's budget search runs it after fusion; plans without a
budget keep the fusion pass's order).

Two rewrites of the fused graph, neither changing what any kernel computes:
- a recomputation (remat) that the fusion pass joined to a sibling kernel as a segment of its own (the
  GELU output recomputed next to the GELU backward) becomes its own kernel again: joined, it must run
  when the sibling does, and its result then lives beside the sibling's inputs and outputs (in the
  MLP backward: the pre-activation, its gradient, the recomputed activation and the activation's
  gradient, all [tokens, 4d], at once); alone, it runs right before its reader;
- the kernels are ordered greedily: of the kernels whose inputs are ready, and that either free at
  least what they write or make another kernel ready (so a result is not written long before its
  reader needs it), the one whose launch (or whose launch followed by one of the launches it
  enables) grows the live bytes least, ties in the fusion pass's order. So the weight gradient that
  frees a recomputed activation runs before the input gradient that allocates. The order is kept
  only when its estimated peak is below the fusion pass's order's (the compiler's budget search
  plans both orders for real and keeps the lower).

Bytes are estimated from the values kernels write (a view kernel of its own writes nothing: it
aliases its input); graph inputs and outputs are bound, not in the arena, and cost nothing here."""

from __future__ import annotations

import dataclasses

from flame.ir.graph import FusionGroup, Graph, Kind, Op, Value, segments
from flame.ir.indexmap import is_reduction, swaps_last_two
from flame.ir.registry import get, is_fill, reads_transposed
from flame.passes.remat import is_recompute, nbytes

SPLIT = "recomputation (remat) split from its sibling kernel: it runs right before its reader (memory budget)"


def schedule_memory(g: Graph) -> Graph:
    """The fused graph g with recomputations split from sibling kernels and its kernels in
    memory-first order (module docstring). Before: a fused graph (groups set). After: the same
    function and kernels (but for the split ones), ops contiguous per kernel in the new launch order.
    g is not modified; a graph without groups is returned as is."""
    if g.groups is None:
        return g
    updated = g.updated()
    groups = [part for grp in g.groups for part in _split_recomputations(grp, updated)]
    index = {op: i for i, op in enumerate(g.ops)}
    groups.sort(key=lambda grp: min(index[o] for o in grp.ops))
    ordered = _memory_order(g, groups)
    if _peak(g, ordered) >= _peak(g, groups):
        ordered = groups
    return dataclasses.replace(g, ops=[op for grp in ordered for op in grp.ops], groups=ordered)


def _split_recomputations(grp: FusionGroup, updated: dict) -> list[FusionGroup]:
    """grp, or its segments made only of recomputations as kernels of their own, then the rest (an
    update's part is one while it still writes an updated value: `updated`, the graph's g.updated())."""
    if grp.kind not in (Kind.ELEMENTWISE, Kind.ROWS) or len(grp.ops) < 2:
        return [grp]
    parts = segments(list(grp.ops))
    moved = [p for p in parts if all(is_recompute(o) or is_fill(o) for o in p)]
    if len(parts) < 2 or not moved:
        return [grp]
    rest = [o for o in grp.ops if not any(o in p for p in moved)]
    out = []
    for ops, reason in [*((p, SPLIT) for p in moved), *([(rest, grp.reason)] if rest else [])]:
        mine = {o.out for o in ops}
        kind = grp.kind if any(is_reduction(o) for o in ops) else Kind.ELEMENTWISE
        written = tuple(v for v in grp.outputs if v in mine)
        update = grp.update and kind == Kind.ELEMENTWISE and any(v in updated for v in written)
        out.append(FusionGroup(tuple(ops), kind, reason, written, grp.epilogue, update))
    return out


class _Live:
    """Bytes written and freed as kernels launch: each written value lives until its last reading
    kernel has launched. A view kernel of its own aliases its input (its readers keep the input)."""

    def __init__(self, g: Graph, groups: list[FusionGroup]):
        self.kernel = {op: i for i, grp in enumerate(groups) for op in grp.ops}
        outs = set(g.outputs)
        users = g.users()
        aliases = {grp.ops[0].out: grp.ops[0].inputs[0] for grp in groups
                   if len(grp.ops) == 1 and _writes_nothing(grp.ops[0], users)}

        def root(v: Value) -> Value:
            while v in aliases:
                v = aliases[v]
            return v

        self.views = {i for i, grp in enumerate(groups) if len(grp.ops) == 1 and grp.ops[0].out in aliases}
        self.written = [sum(nbytes(v) for v in grp.outputs if v not in aliases and v not in outs) for grp in groups]
        self.reads: list[set[Value]] = []
        self.readers: dict[Value, set[int]] = {}
        for i, grp in enumerate(groups):
            mine = {o.out for o in grp.ops}
            rs = {root(v) for o in grp.ops for v in o.inputs if v not in mine}
            rs = {r for r in rs if r.producer in self.kernel and r not in outs and self.kernel[r.producer] != i}
            self.reads.append(rs)
            for r in rs:
                self.readers.setdefault(r, set()).add(i)
        self.preds = [{self.kernel[v.producer] for o in grp.ops for v in o.inputs if v.producer in self.kernel}
                      - {i} for i, grp in enumerate(groups)]
        chain = [i for i, grp in enumerate(groups) if grp.kind == Kind.COLLECTIVE]
        for a, b in zip(chain, chain[1:]):  # collectives in program order (every rank issues the same)
            self.preds[b].add(a)

    def freed(self, i: int, done: set[int]) -> int:
        """Bytes that die when kernel i launches after the kernels in done."""
        return sum(nbytes(r) for r in self.reads[i] if self.readers[r] <= done | {i})

    def growth(self, i: int, done: set[int]) -> int:
        return self.written[i] - self.freed(i, done)


def _writes_nothing(op: Op, users: dict[Value, list[Op]]) -> bool:
    """A kernel of op alone writes no buffer: a relabelling view, or a transpose of the last two axes
    that only matmuls read (the plan builder folds it into their calls: plan.build.fold_transposes)."""
    view = get(op.name).view
    if view is not None and view.relabel:
        return True
    return swaps_last_two(op) and bool(users[op.out]) and all(map(reads_transposed, users[op.out]))


def _memory_order(g: Graph, groups: list[FusionGroup]) -> list[FusionGroup]:
    """Greedy order (module docstring): least growth of live bytes, looking one launch ahead."""
    live = _Live(g, groups)
    succs: list[set[int]] = [set() for _ in groups]
    for i, ps in enumerate(live.preds):
        for p in ps:
            succs[p].add(i)
    waiting = [len(ps) for ps in live.preds]
    ready = {i for i, n in enumerate(waiting) if n == 0}
    done: set[int] = set()
    order: list[int] = []
    while ready:
        urgent = [i for i in ready if _completes(live, succs, i, done) or live.growth(i, done) <= 0]
        best = min(urgent or ready, key=lambda i: (_lookahead(live, succs, i, done), i))
        ready.discard(best)
        done.add(best)
        order.append(best)
        for s in succs[best]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.add(s)
    if len(order) != len(groups):
        raise AssertionError("internal error: kernel graph has a cycle")
    return [groups[i] for i in order]


def _enabled(live: _Live, succs: list[set[int]], i: int, done: set[int]) -> list[tuple[int, set[int]]]:
    """The kernels that launching i makes ready, each with what is done then (views that i's launch
    makes ready count as launched with it: they write nothing)."""
    after, out, todo = done | {i}, [], [i]
    while todo:
        for s in succs[todo.pop()]:
            if s not in after and live.preds[s] <= after:
                if s in live.views:
                    after = after | {s}
                    todo.append(s)
                else:
                    out.append(s)
    return [(s, after) for s in out]


def _completes(live: _Live, succs: list[set[int]], i: int, done: set[int]) -> bool:
    """Launching i makes a kernel ready (a result that is read soon, not one held for later)."""
    return bool(_enabled(live, succs, i, done))


def _lookahead(live: _Live, succs: list[set[int]], i: int, done: set[int]) -> int:
    """The least growth of launching i, or i then one kernel that i's launch makes ready."""
    first = live.growth(i, done)
    return min([first, *(first + live.growth(s, after) for s, after in _enabled(live, succs, i, done))])


def _peak(g: Graph, groups: list[FusionGroup]) -> int:
    """The most bytes live at once when the kernels launch in this order (the estimate above)."""
    live = _Live(g, groups)
    done: set[int] = set()
    now = peak = 0
    for i in range(len(groups)):
        now += live.written[i]
        peak = max(peak, now)
        now -= live.freed(i, done)
        done.add(i)
    return peak
