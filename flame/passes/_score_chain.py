"""The score modification of hand-written attention: the elementwise ops between the scaled scores
`q @ k^T * scale` and the softmax, and the boolean masks among them, as a sub-graph (used by
passes/rewrite_attention.py; the sub-graph's contract is in flame/ir/ops/attention.py).

    chain ops   every op with a data path from the scores to the softmax's input: elementwise (no random
                draws), of the scores' shape (soft-capping tanh(s / c) * c, s * scale_per_head, ...)
    side ops    what those read besides the scores: elementwise ops, views, gathers (index_select,
                gather) and constants (arange positions, fills), none of them reading the scores
    extras      where the side ops start: graph inputs and results of other ops (a per-head slope, a
                relative-position table, segment ids ...); none may be a score-sized [..., L, S] matrix
                (that is an attention mask input) or depend on the scores
    keep masks  the outermost `where(keep, x, -inf)` / `where(drop, -inf, x)` (masked_fill) of the chain,
                with a condition that does not read the scores: they become the sub-graph's bool output

Nothing here decides whether the attention is rewritten; `extract` says what the chain is, `build` makes
the sub-graph."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flame.ir.builder import Builder
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops.elementwise import ADD, CAST, WHERE
from flame.ir.registry import get, is_constant
from flame.passes._rewrite import full_value


@dataclass
class Chain:
    """What lies between the scaled scores `base` and the softmax input: `ops` (chain and side ops in
    program order, the peeled masks left out), `score` (the value the softmax reads: its masks peeled
    through `through`), `keeps`
    ((condition, "keep" | "drop") per peeled where; (mask, "causal") for an added causal mask), `peeled`
    (those ops), `extras` (the values the side ops start from)."""

    ops: list[Op]
    score: Value
    keeps: list[tuple[Value, str]] = field(default_factory=list)
    peeled: list[Op] = field(default_factory=list)
    extras: list[Value] = field(default_factory=list)
    through: dict[Value, Value] = field(default_factory=dict)  # a peeled op's result -> the value it masks

    def resolve(self, v: Value) -> Value:
        """v, or what a peeled mask op's result stands for once the mask is taken out."""
        while v in self.through:
            v = self.through[v]
        return v

    @property
    def chain_ops(self) -> list[Op]:
        return self.ops + self.peeled


def reachable_from(ops: list[Op], start: Value) -> set[Value]:
    """start and the results of `ops` (in program order) that read it, directly or through each other."""
    seen = {start}
    for op in ops:
        if any(v in seen for v in op.inputs):
            seen.add(op.out)
    return seen


def _ancestors(x: Value, stop: Value) -> set[Value]:
    seen, stack = set(), [x]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v is not stop and v.producer is not None:
            stack.extend(v.producer.inputs)
    return seen


def _elementwise(op: Op) -> bool:
    d = get(op.name)
    return d.category == "elementwise" and not d.random


def _side_op(op: Op) -> bool:
    """An op a kernel can compute per score element: elementwise (no random draws), a view, a gather or
    a constant."""
    d = get(op.name)
    return not d.random and (d.category in ("elementwise", "movement") or d.selects or is_constant(op))


def _score_sized(v: Value, length: int, keys: int) -> bool:
    return v.type.rank >= 2 and v.shape[-2:] == (length, keys) and length * keys > 1


def _widening(op: Op) -> bool:
    """A cast between float dtypes that loses nothing (s.float() before the softmax)."""
    x = op.inputs[0].dtype
    return op.name == CAST.name and x.is_float and op.out.dtype.is_float and op.out.dtype.itemsize >= x.itemsize


def _peel_keeps(x: Value, chain: set[Op], dep: set[Value], causal_add) -> tuple[list, list, dict]:
    """The outermost where(-inf) masks of the chain ending at x whose condition does not read the scores
    (under widening casts too: a cast of -inf is -inf), and one added constant that `causal_add(value)`
    says is PyTorch's causal mask (0 / -inf): (keeps, peeled ops, each peeled op's result -> its scores
    operand, which takes its place)."""
    keeps, peeled, through = [], [], {}
    while x.producer is not None and x.producer in chain:
        op = x.producer
        if _widening(op):
            x = op.inputs[0]
            continue
        if op.name == ADD.name:
            a, b = op.inputs
            s, mask = (a, b) if b not in dep else (b, a)
            if mask in dep or s.type != x.type or any(k == "causal" for _, k in keeps) or not causal_add(mask):
                break
            keeps.append((mask, "causal"))
        elif op.name == WHERE.name and op.inputs[0] not in dep:
            cond, a, b = op.inputs
            for s, fill, kind in ((a, b, "keep"), (b, a, "drop")):
                value = full_value(fill)
                if s.type == x.type and value is not None and np.isneginf(value):
                    keeps.append((cond, kind))
                    break
            else:
                break
        else:
            break
        peeled.append(op)
        through[op.out] = x = s
    return keeps, peeled, through


def extract(ops: list[Op], x: Value, base: Value, scores_of: Value, causal_add) -> Chain | None:
    """The chain from `base` (the scaled scores) to `x` (the softmax input) in graph ops `ops`, or None
    when something on it is not a score modification. `scores_of`: the matmul's result (nothing the
    side ops read may depend on it); `causal_add(value)`: whether an added value is the causal mask
    (peeled as a keep of kind "causal")."""
    shape = base.shape
    length, keys = shape[-2:]
    dep_mm = reachable_from(ops, scores_of)
    anc = _ancestors(x, base)
    chain = [op for op in ops if op.out in dep_mm and op.out in anc and op.out is not base]
    if any(not _elementwise(op) or op.out.shape != shape for op in chain):
        return None
    inside = set(chain)
    keeps, peeled, through = _peel_keeps(x, inside, dep_mm, causal_add)
    side, extras, stack = set(), [], [v for op in chain for v in op.inputs if v not in dep_mm]
    while stack:
        v = stack.pop()
        if v in side or v in extras:
            continue
        if v in dep_mm:
            return None  # a side operand computed from the scores (a reduction of them ...)
        op = v.producer
        if op is not None and _side_op(op):
            side.add(v)
            stack.extend(op.inputs)
        elif _score_sized(v, length, keys):
            return None  # a score-sized operand: an attention mask, not a score modification
        else:
            extras.append(v)
    ops_in = [op for op in ops if op in inside or op.out in side]
    return Chain([op for op in ops_in if op not in peeled], x, keeps, peeled, extras, through)


def build(chain: Chain, base: Value, keeps: list[tuple[Value, str]]) -> tuple[Graph, list[Value]]:
    """The score modification as a graph: inputs (scores, *extras), outputs (score[, keep]) where keep
    is the conjunction of `keeps`; only the ops those need. Returns it and the extras it reads."""
    wanted = [chain.resolve(chain.score), *(c for c, _ in keeps)]
    needed, stack = set(), list(wanted)
    by_out = {op.out: op for op in chain.ops}
    while stack:
        v = chain.resolve(stack.pop())
        if v in needed:
            continue
        needed.add(v)
        if v in by_out:
            stack.extend(by_out[v].inputs)
    sub = Graph("score_mod")
    renamed = {base: sub.add_input(base.type)}
    extras = [e for e in chain.extras if e in needed and e is not base]
    for e in extras:
        renamed[e] = sub.add_input(e.type)
    for op in chain.ops:
        if op.out in needed:
            new = Op(op.name, tuple(renamed[chain.resolve(v)] for v in op.inputs), op.attrs, op.out.type)
            sub.ops.append(new)
            renamed[op.out] = new.out
    b = Builder(sub)
    keep = None
    for cond, kind in keeps:
        c = renamed[cond] if kind == "keep" else b.logical_not(renamed[cond])
        keep = c if keep is None else b.logical_and(keep, c)
    sub.outputs = [renamed[chain.resolve(chain.score)], *([keep] if keep is not None else [])]
    return sub, extras


def is_plain(sub: Graph) -> bool:
    """The modification changes nothing but the precision: no keep mask, and at most widening casts of
    the scores (s.float() before the softmax), which the attention op computes in anyway."""
    x = sub.inputs[0]
    for op in sub.ops:
        if op.name != CAST.name or op.inputs[0] is not x or op.out.dtype.itemsize < x.dtype.itemsize:
            return False
        x = op.out
    return len(sub.outputs) == 1 and sub.outputs[0] is x
