"""Strided views: where the elements of a value produced by view ops (reshape, squeeze, unsqueeze,
permute, slice) sit in the buffer of the value they view, as (start, strides) in elements. The plan
builder owns the decisions made with them (flame.plan.build): a view whose layout over its input's
buffer is contiguous is an Alias (`view_start`); a library call that takes strided operands
(attention, through cuDNN's graph API) reads a chain of views straight from the chain's root buffer
and writes its result straight into the buffer of the permuted value its consumers want
(`fold_attention_views`), so the copies of those views never run. Every flame buffer is contiguous;
a strided layout exists only inside the library call that reads or writes through it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from flame.ir.graph import Graph, Op, Value
from flame.ir.indexmap import contiguous_strides, input_map, is_view
from flame.ir.ops.attention import BACKWARD, FORWARD, STATS, extras_of
from flame.ir.registry import axis_order, get, is_relabel
from flame.plan.steps import ALIGN

ATTENTION = (FORWARD, STATS, BACKWARD)
# the operands of an attention op that its library call takes strided, by input position
STRIDED_INPUTS = {FORWARD: ("q", "k", "v"), STATS: ("q", "k", "v"), BACKWARD: ("q", "k", "v", "o", "grad_out")}


@dataclass(frozen=True)
class Strided:
    """A tensor's elements at `start + sum(coord[d] * strides[d])` of a buffer (in elements)."""

    start: int
    strides: tuple[int, ...]

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> Strided:
        return Strided(0, contiguous_strides(tuple(shape)))

    def is_contiguous(self, shape: tuple[int, ...]) -> bool:
        """Row-major over `shape` (size-1 dims may have any stride)."""
        want = contiguous_strides(tuple(shape))
        return all(n == 1 or s == w for n, s, w in zip(shape, self.strides, want))

    def format(self) -> str:
        return f"+{self.start}[{','.join(map(str, self.strides))}]"


def _unit_strides(shape, strides) -> tuple[int, ...]:
    """Size-1 dims get the stride a contiguous layout would give them (their stride is never used)."""
    out = list(strides)
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            out[d] = out[d + 1] * shape[d + 1] if d + 1 < len(shape) else 1
    return tuple(out)


def reshaped(lay: Strided, src: tuple[int, ...], dst: tuple[int, ...]) -> Strided | None:
    """The layout of a strided tensor of shape src seen as shape dst (same elements, row-major
    order), or None when that needs a copy: each group of src dims merged or split must be
    contiguous within itself (NumPy's no-copy reshape)."""
    if math.prod(src) != math.prod(dst) or 0 in src:
        return None
    big = [(n, s) for n, s in zip(src, lay.strides) if n != 1]
    want = [j for j, n in enumerate(dst) if n != 1]
    out = [0] * len(dst)
    i = k = 0
    while i < len(big):
        ps, pd, i2, k2 = big[i][0], dst[want[k]], i + 1, k + 1
        while ps != pd:
            if ps < pd:
                ps, i2 = ps * big[i2][0], i2 + 1
            else:
                pd, k2 = pd * dst[want[k2]], k2 + 1
        if any(big[a][1] != big[a + 1][1] * big[a + 1][0] for a in range(i, i2 - 1)):
            return None
        st = big[i2 - 1][1]
        for b in reversed(range(k, k2)):
            out[want[b]] = st
            st *= dst[want[b]]
        i, k = i2, k2
    return Strided(lay.start, _unit_strides(dst, out))


def view_layout(op: Op, lay: Strided) -> Strided | None:
    """The layout of view op's result when its input has layout `lay`, or None when it has none
    (a reshape merging dims that are not contiguous) or reads backwards or repeats elements (flip,
    broadcast: no library call takes those)."""
    src, dst, view = op.inputs[0].shape, op.out.shape, get(op.name).view
    if view is None:
        return None
    if view.relabel:
        return reshaped(lay, src, dst)
    m = input_map(op, 0)
    if m is None:
        return None
    strides = tuple(sum(s * r[d] for s, r in zip(lay.strides, m.rows)) for d in range(m.cols))
    if any(s <= 0 for n, s in zip(dst, strides) if n != 1):
        return None
    return Strided(lay.start + sum(s * b for s, b in zip(lay.strides, m.base)), _unit_strides(dst, strides))


def unview_layout(op: Op, lay: Strided) -> Strided | None:
    """The layout of a bijective view op's input when its result has layout `lay` (the inverse of
    view_layout), or None for other views or layouts a reshape cannot give back."""
    order = axis_order(op)
    if order is not None:
        strides = [0] * len(lay.strides)
        for j, p in enumerate(order):
            strides[p] = lay.strides[j]
        return Strided(lay.start, tuple(strides))
    if is_relabel(op):
        return reshaped(lay, op.out.shape, op.inputs[0].shape)
    return None


def flat_range(lay: Strided, shape: tuple[int, ...], lo: int, hi: int, dst: tuple[int, ...]) -> Strided | None:
    """The layout of elements [lo, hi) (row-major) of a tensor of `shape` and layout `lay`, seen as
    shape dst: a slice along one axis, then a reshape; None where that is not a strided view."""
    start, strides, shape = lay.start, list(lay.strides), list(shape)
    if hi <= lo or 0 in shape:  # an empty range: nothing to view (the caller keeps its own buffer)
        return None
    while shape:
        inner = math.prod(shape[1:])
        if lo % inner == 0 and hi % inner == 0:
            return reshaped(Strided(start + lo // inner * strides[0], tuple(strides)),
                            ((hi - lo) // inner, *shape[1:]), dst)
        if lo // inner != (hi - 1) // inner:
            return None
        start += lo // inner * strides[0]
        lo, hi = lo % inner, lo % inner + hi - lo
        shape, strides = shape[1:], strides[1:]
    return None


def view_start(op: Op) -> int | None:
    """Where op's result starts in its input's elements when it can be a view of the input's bytes
    (its layout over the contiguous input is contiguous: relabelling reshapes, permutes that keep
    every axis of size > 1 in order, a slice selecting one contiguous block), else None. A start
    past 0 must keep ALIGN-byte alignment (kernels load vectors)."""
    if get(op.name).view is None:
        return None
    lay = view_layout(op, Strided.contiguous(op.inputs[0].shape))
    if lay is None or not lay.is_contiguous(op.out.shape):
        return None
    return lay.start if (lay.start * op.out.type.dtype.itemsize) % ALIGN == 0 else None


# ---- attention operands read and written through strides ------------------------------------------


@dataclass
class Folded:
    """What fold_attention_views decided. `at[v]`: value v has no buffer of its own; its elements
    are those of `root`'s buffer at a Strided layout (an attention operand, or a forward's result
    written into the buffer of the permuted value its consumers read). `grads[op]`: a backward
    writes dq, dk, dv into the buffer of `root` at these layouts (its packed result gets no buffer).
    `skipped`: the view ops that run no step. `refused[v]`: why the attention operand v (the result
    of views) is copied after all."""

    at: dict[Value, tuple[Value, Strided]] = field(default_factory=dict)
    grads: dict[Op, tuple[Value, tuple[Strided, ...]]] = field(default_factory=dict)
    skipped: set[Op] = field(default_factory=set)
    refused: dict[Value, str] = field(default_factory=dict)

    def stored_in(self, op: Op) -> Value:
        """The value whose buffer holds attention op's result(s)."""
        if op in self.grads:
            return self.grads[op][0]
        return self.at[op.out][0] if op.out in self.at else op.out


@dataclass
class _Fold:
    """One candidate: the view ops it skips, and the values / gradients it places."""

    ops: set[Op]
    at: dict[Value, tuple[Value, Strided]] = field(default_factory=dict)
    grads: dict[Op, tuple[Value, tuple[Strided, ...]]] = field(default_factory=dict)


def _views_alone(g: Graph) -> set[Op]:
    """View ops that are not part of a kernel doing other work (the fusion pass's groups of views
    only; every view op of an unfused graph)."""
    if g.groups is None:
        return {op for op in g.ops if is_view(op)}
    return {op for grp in g.groups if all(is_view(o) for o in grp.ops) for op in grp.ops}


def _read_chain(x: Value, alone: set[Op]) -> tuple[Value, list[Op], Strided] | None:
    """(root, view ops from root to x, x's layout in root's buffer) for the longest chain of views
    ending at x with a layout; None when x is not a view or no chain has one."""
    chain, y = [], x
    while y.producer is not None and y.producer in alone:
        chain.insert(0, y.producer)
        y = y.producer.inputs[0]
    for i in range(len(chain)):
        lay = Strided.contiguous(chain[i].inputs[0].shape)
        for op in chain[i:]:
            lay = lay and view_layout(op, lay)
        if lay is not None:
            return chain[i].inputs[0], chain[i:], lay
    return None


def _write_chain(v: Value, g: Graph, users: dict, alone: set[Op]) -> list[Op]:
    """The bijective views that alone carry v on: v's one user that is not an attention op, as long
    as it is such a view of its own (a permute, a reshape), and so on; the last one's result is the
    buffer a library call may write v into. Empty when they only relabel (aliases already)."""
    chain, outs = [], set(g.outputs)
    while v not in outs:
        rest = [u for u in users[v] if u.name not in ATTENTION]
        if len(rest) != 1 or not (axis_order(rest[0]) is not None or is_relabel(rest[0])) or rest[0] not in alone:
            break
        chain.append(rest[0])
        v = rest[0].out
    return [] if all(view_start(op) == 0 for op in chain) else chain


def fold_attention_views(g: Graph, layout_unsupported, users: dict | None = None) -> Folded:
    """Which attention operands are read, and which attention results written, through strides
    (see Folded). `layout_unsupported(op, name, shape, layout)` says why the library cannot take
    operand `name` of attention op `op` at that layout ("" if it can). A chain is folded only when
    every value it computes is read by nothing but the chain and attention calls that take it
    strided (no kernel, no graph output needs its buffer), and a group of views runs wholly or not.
    users: g.users(), where the caller has it."""
    users, alone = g.users() if users is None else users, _views_alone(g)
    folds, refused = [], {}
    for op in [op for op in g.ops if op.name in (FORWARD, BACKWARD)]:
        got = _fold_result(op, g, users, alone, layout_unsupported)
        if got is not None:
            folds.append(got)
    placed = {v for fd in folds for v in fd.at}
    for op in [op for op in g.ops if op.name in ATTENTION]:
        for x, name in zip(op.inputs, STRIDED_INPUTS[op.name]):
            got = None if x in placed else _read_chain(x, alone)
            if got is None:
                continue
            root, chain, lay = got
            why = layout_unsupported(op, name, x.shape, lay)
            if why:
                refused[x] = f"{op.name} reads {name} through views, but {why}"
                continue
            folds.append(_Fold(set(chain), {x: (root, lay)}))
    return _settle(folds, g, users, refused)


def _fold_result(op: Op, g: Graph, users: dict, alone: set[Op], layout_unsupported) -> _Fold | None:
    """Store op's result (a forward's out, a backward's dq, dk, dv) in the buffer its views make."""
    chain = _write_chain(op.out, g, users, alone)
    if not chain or (op.name == BACKWARD and extras_of(op)):
        return None  # a backward that also packs a score modification's gradients writes its flat result
    root = chain[-1].out
    lays, lay = [Strided.contiguous(root.shape)], Strided.contiguous(root.shape)
    for u in reversed(chain):
        lay = lay and unview_layout(u, lay)
        lays.insert(0, lay)
    fold = _Fold(set(chain), {u.out: (root, lay) for u, lay in zip(chain[:-1], lays[1:-1]) if lay is not None})
    if op.name == FORWARD:
        if lays[0] is None or layout_unsupported(op, "o", op.out.shape, lays[0]):
            return None
        fold.at[op.out] = (root, lays[0])
        return fold
    parts = _grad_parts(op, chain, lays)
    if parts is None or any(layout_unsupported(op, n, x.shape, p)
                            for n, x, p in zip(("dq", "dk", "dv"), op.inputs, parts)):
        return None
    fold.grads[op] = (root, parts)
    return fold


def _grad_parts(op: Op, chain: list[Op], lays: list) -> tuple[Strided, ...] | None:
    """dq, dk, dv's layouts: flat ranges of the packed result, found through the first value of the
    chain with a layout that only reshapes (keeps the row-major order of) the packed result."""
    for u, lay in zip(chain, lays[1:]):
        if lay is not None:
            parts, at = [], 0
            for x in op.inputs[:3]:
                parts.append(flat_range(lay, u.out.shape, at, at + x.type.numel, x.shape))
                at += x.type.numel
            return None if None in parts else tuple(parts)
        if not is_relabel(u):
            return None
    return None


def _takes_strided(u: Op, v: Value) -> bool:
    """Attention op u reads v only as operands its library call takes strided (not as its mask)."""
    n = len(STRIDED_INPUTS.get(u.name, ()))
    return n > 0 and v in u.inputs[:n] and v not in u.inputs[n:]


def _settle(folds: list[_Fold], g: Graph, users: dict, refused: dict) -> Folded:
    """Drop folds until every skipped view's result is read only by skipped views or by attention
    calls that take it strided and is no graph output, and no group mixes skipped and run ops."""
    outs = set(g.outputs)
    groups = [] if g.groups is None else [set(grp.ops) for grp in g.groups]
    while True:
        skipped = {op for fd in folds for op in fd.ops}
        at = {v: p for fd in folds for v, p in fd.at.items()}
        roots = {p[0] for fd in folds for p in (*fd.at.values(), *fd.grads.values())}  # results a call writes
        bad = {op for op in skipped - {r.producer for r in roots}
               if op.out in outs or any(u not in skipped and not (op.out in at and _takes_strided(u, op.out))
                                        for u in users[op.out])}
        bad |= {op for ops in groups if ops & skipped and not ops <= skipped for op in ops & skipped}
        if not bad:
            grads = {op: p for fd in folds for op, p in fd.grads.items()}
            return Folded(at, grads, skipped, refused)
        folds = [fd for fd in folds if not fd.ops & bad]
