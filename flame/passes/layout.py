"""Channels-last activations inside a step's convolutional segments, the user's tensors
still NC*.

cuDNN's fast convolution kernels read and write [N, *S, C]; handed NC* tensors, it transposes them
itself, each call. This pass makes every convolution op channels_last (ir/ops/conv.py: its x, y and
their gradients are [N, *S, C]) and then keeps the activations around it channels-last too, so the
only transposes left are at the segment's edges: where a user's NC* input enters, where a value leaves
as a graph output, and where a library call that is not a convolution (matmul, attention) reads one.

One forward sweep over the ops. Each old value maps to a new value and a permutation p with
    old == permute(new, p)
(p None: the same layout). A convolution asks for its activations in the channels-last order and
yields a result whose p moves the channels back to dim 1. An op that does not care about the order of
dims (non-positional elementwise ops, reductions, broadcast_to, concat, slice, pad, flip, and permute,
reshape, squeeze, unsqueeze where the dims they split or merge stay adjacent) runs in its first
permuted operand's order: its other operands are permuted to match (a per-channel vector [1, C, 1, 1]
becomes the reshape [1, 1, 1, C]), its attributes (axes, pads, slices) renumbered, and its result keeps
the permutation. Any other op, and every graph output, reads the value permuted back (one permute op,
shared by all such readers), so that transpose appears exactly where the layout must change; two
transposes meeting cancel, since a permutation of a permuted value composes with it instead of being
emitted. A reduction over trailing dims that the new order interleaves (GroupNorm's statistics over
[N, G, C/G, H, W], [N, H, W, G, C/G] channels-last) reads a permuted view whose reduced dims are
last, channels innermost, so it stays a row reduction; the norm's elementwise work stays in the new
order, and the fusion pass makes the whole norm one row kernel that reads and writes channels-last
(ir/indexmap.py: stores through a permute or reshape). The fusion pass folds a permute into the
kernel reading it, except before a library call.

Before: a simplified graph (conv ops NC*). After: the same function, conv ops channels_last, the
permutes only at the layout's edges. Random draws are left in their order (their bits depend on the
index), and weights keep their [C_out, C_in/groups, *K] layout."""

from __future__ import annotations

import math

from flame.ir.builder import Builder
from flame.ir.graph import Graph, Op, Value
from flame.ir.indexmap import is_reduction
from flame.ir.ops.conv import CONV_OPS, to_channels_last
from flame.ir.registry import axis_order, is_relabel
from flame.ir.registry import get as opdef
from flame.passes.dce import eliminate_dead_code
from flame.target import DEFAULT_TARGET, Target

Perm = tuple[int, ...]


def channels_last(g: Graph, target: Target = DEFAULT_TARGET) -> Graph:
    """g with channels-last convolutions and activations (see the module's docstring); g itself when
    the target keeps NC* (`Target.conv_channels_last`) or g has no convolution. The NC* ops whose
    readers moved to the channels-last values are dropped (a per-channel weight's [1, C, 1, 1] cast
    left in a kernel was a second row segment that kept a BatchNorm's column sums out of it)."""
    if not target.conv_channels_last or not any(op.name in CONV_OPS for op in g.ops):
        return g
    return eliminate_dead_code(_Sweep(g).run())


def _identity(p: Perm | None) -> bool:
    return p is None or p == tuple(range(len(p)))


def _inverse(p: Perm) -> Perm:
    inv = [0] * len(p)
    for i, j in enumerate(p):
        inv[j] = i
    return tuple(inv)


def _unit_moves(shape, perm: Perm) -> bool:
    """permute(x, perm) of an x of `shape` moves only unit dims (it is a reshape)."""
    return [d for d in perm if shape[d] != 1] == [d for d in range(len(perm)) if shape[d] != 1]


def _trailing(axes: set[int], rank: int) -> bool:
    return axes == set(range(rank - len(axes), rank))


def _to_first(rank: int) -> Perm:
    """The permutation whose result is NC* from an [N, *S, C] tensor."""
    return (0, rank - 1, *range(1, rank - 1))


class _Sweep:
    def __init__(self, g: Graph):
        self.g = g
        self.new = Graph(g.name)
        self.b = Builder(self.new)
        self.env: dict[Value, tuple[Value, Perm | None]] = {
            v: (self.new.add_input(v.type, r), None) for v, r in zip(g.inputs, g.roles)}
        self._permuted: dict[tuple[Value, Perm], Value] = {}

    def run(self) -> Graph:
        for op in self.g.ops:
            self.b.loc = op.loc
            rule = _Sweep._conv if op.name in CONV_OPS else _RULES.get(op.name) or _category_rule(op)
            got = rule(self, op) if rule is not None else None
            self.env[op.out] = got if got is not None else (self._copy(op, [self.plain(v) for v in op.inputs]), None)
        self.new.outputs = [self.plain(v) for v in self.g.outputs]
        self.new.aliases = dict(self.g.aliases)
        return self.new

    # ---- values in a chosen order -------------------------------------------------------------------

    def _copy(self, op: Op, inputs: list[Value], **attrs) -> Value:
        return self.b.emit(op.name, *inputs, **{**op.attrs, **attrs})

    def permute(self, v: Value, perm: Perm) -> Value:
        """permute(v, perm) in the new graph: nothing for the identity, a reshape when only unit dims
        move, composed with v's own permute (so that two transposes cancel); one op per (v, perm)."""
        if _identity(perm):
            return v
        key = (v, perm)
        if key not in self._permuted:
            src = v.producer
            inner = axis_order(src)
            if inner is not None:  # permute(permute(x, a), b) = permute(x, a[b])
                self._permuted[key] = self.permute(src.inputs[0], tuple(inner[i] for i in perm))
            elif src is not None and is_relabel(src) and _unit_moves(v.shape, perm):
                self._permuted[key] = self.b.reshape(src.inputs[0], shape=tuple(v.shape[i] for i in perm))
            elif _unit_moves(v.shape, perm):
                self._permuted[key] = self.b.reshape(v, shape=tuple(v.shape[i] for i in perm))
            else:
                self._permuted[key] = self.b.permute(v, perm=perm)
        return self._permuted[key]

    def plain(self, old: Value) -> Value:
        """The new value equal to `old` (its permutation applied)."""
        new, p = self.env[old]
        return new if p is None else self.permute(new, p)

    def in_order(self, old: Value, q: Perm) -> Value:
        """A new value v with old == permute(v, q) (old of a lower rank broadcasts: leading unit dims
        are added first; a 0-d value is itself)."""
        new, p = self.env[old]
        rank = len(q)
        if old.type.rank == 0:
            return new
        if old.type.rank < rank:
            new, p = self.b.reshape(self.plain(old), shape=(1,) * (rank - old.type.rank) + old.shape), None
        p = p or tuple(range(rank))
        return self.permute(new, tuple(p[j] for j in _inverse(q)))

    def order_of(self, op: Op) -> Perm | None:
        """The permutation an order-agnostic op runs in: that of its largest permuted full-rank operand."""
        best = None
        for v in op.inputs:
            p = self.env[v][1]
            if not _identity(p) and v.type.rank == op.out.type.rank and (best is None or v.type.numel > best[0]):
                best = (v.type.numel, p)
        return None if best is None else best[1]

    # ---- rules: each returns (new value, its permutation) or None to read the operands plainly -------

    def _conv(self, op: Op):
        rank = op.inputs[0].type.rank
        first = _to_first(rank)
        acts = opdef(op.name).activations  # per operand, then the result: an activation [N, C, *S]
        ins = [self.in_order(v, first) if act else self.plain(v) for v, act in zip(op.inputs, acts)]
        extra = {"input_shape": to_channels_last(op.attrs["input_shape"])} if "input_shape" in op.attrs else {}
        out = self._copy(op, ins, channels_last=True, **extra)
        return out, (first if acts[-1] else None)

    def _elementwise(self, op: Op):
        q = self.order_of(op)
        if q is None:
            return None
        return self._copy(op, [self.in_order(v, q) for v in op.inputs]), q

    def _reduction(self, op: Op):
        """In the new order. Over trailing dims that the new order interleaves with kept ones (GroupNorm's
        [N, H, W, G, C/G]): a row reduction of a permuted view (_rows). Over dims the new order keeps
        together (a global average pool's H, W of [N, H, W, C]): a reduction over those middle dims
        of the channels-last value itself, which the column schedule reads coalesced (codegen/reduce.py;
        through a permuted view it would be a row reduction reading one element per channel stride:
        252 us at 9% of copy in resnet_block_train, against 19.8: benchmarks/results/2026-11-27-H200-lora/)."""
        new, q = self.env[op.inputs[0]]
        if _identity(q):
            return None
        rank = len(q)
        axes = {a % rank for a in op.attrs["axes"]}
        moved = sorted(q[a] for a in axes)
        if _trailing(axes, rank) and not _trailing(set(moved), rank) and moved != list(range(moved[0], moved[-1] + 1)):
            return self._rows(op, new, q, axes)
        out = self._copy(op, [new], axes=sorted(q[a] for a in axes))
        if op.attrs["keepdim"]:
            return out, q
        kept = sorted(q[i] for i in range(rank) if i not in axes)
        return out, tuple(kept.index(q[i]) for i in range(rank) if i not in axes)

    def _rows(self, op: Op, new: Value, q: Perm, axes: set[int]):
        """A reduction over trailing dims (a norm's statistics, e.g. GroupNorm's over [N, G, C/G, H, W])
        whose dims the new order interleaves ([N, H, W, G, C/G]): it reads a permuted view with the
        kept dims first and the reduced ones last, each in the new order (channels innermost), so it
        stays a row reduction, which the fusion pass fuses with the norm's elementwise work (that
        work runs in the new order; the row kernel reads and writes it through the view)."""
        rank = len(q)
        kept = sorted(q[i] for i in range(rank) if i not in axes)
        red = sorted(q[a] for a in axes)
        r = tuple(kept + red)
        out = self._copy(op, [self.permute(new, r)], axes=list(range(len(kept), rank)))
        if not op.attrs["keepdim"]:
            return out, tuple(kept.index(q[i]) for i in range(rank) if i not in axes)
        return out, tuple(r.index(q[i]) for i in range(rank))

    def _permute_op(self, op: Op):
        new, p = self.env[op.inputs[0]]
        if _identity(p):
            return None  # a user's permute of a plain value stays as it is
        return new, tuple(p[i] for i in op.attrs["perm"])

    def _reshape(self, op: Op):
        new, q = self.env[op.inputs[0]]
        if _identity(q):
            return None
        found = _commute_reshape(op.inputs[0].shape, op.out.shape, q)
        if found is None:
            return None
        shape, q2 = found
        return self.b.reshape(new, shape=shape), q2

    def _per_dim(self, op: Op, **renumber):
        """An op whose attributes hold one entry per dim (or dim numbers) that runs in its operands' order."""
        q = self.order_of(op)
        if q is None:
            return None
        inv = _inverse(q)
        attrs = {}
        for name, how in renumber.items():
            val = op.attrs[name]
            if how == "dims":  # a list of dim numbers
                attrs[name] = sorted(q[a % len(q)] for a in val)
            elif how == "dim":
                attrs[name] = q[val % len(q)]
            else:  # one entry per dim, in dim order
                attrs[name] = [val[inv[j]] for j in range(len(q))]
        return self._copy(op, [self.in_order(v, q) for v in op.inputs], **attrs), q


def _category_rule(op: Op):
    d = opdef(op.name)
    if d.category == "elementwise" and not d.positional and not d.random and op.inputs:
        return _Sweep._elementwise
    if is_reduction(op):
        return _Sweep._reduction
    if is_relabel(op):
        return _Sweep._reshape
    return None


_RULES = {
    "permute": _Sweep._permute_op,
    "broadcast_to": lambda s, op: s._per_dim(op, shape="each"),
    "concat": lambda s, op: s._per_dim(op, axis="dim"),
    "slice": lambda s, op: s._per_dim(op, starts="each", stops="each", steps="each"),
    "pad": lambda s, op: s._per_dim(op, pads="each"),
    "flip": lambda s, op: s._per_dim(op, axes="dims"),
}


def _groups(shape_in, shape_out) -> list[tuple[list[int], list[int]]] | None:
    """The reshape shape_in -> shape_out as groups (in dims, out dims) of equal element counts, each the
    fewest non-unit dims; a unit out dim joins the group of the non-unit out dim before it (the first
    group if none). None when there is no non-unit dim or no element (a 0 matches no product)."""
    ins = [i for i, s in enumerate(shape_in) if s != 1]
    outs = [k for k, s in enumerate(shape_out) if s != 1]
    if not ins or not outs or 0 in shape_in or 0 in shape_out:
        return None
    groups, i, k = [], 0, 0
    while i < len(ins):
        gi, go = [ins[i]], [outs[k]]
        pi, po = shape_in[ins[i]], shape_out[outs[k]]
        i, k = i + 1, k + 1
        while pi != po:
            if pi < po:
                gi.append(ins[i])
                pi, i = pi * shape_in[ins[i]], i + 1
            else:
                go.append(outs[k])
                po, k = po * shape_out[outs[k]], k + 1
        groups.append((gi, go))
    for u in (k for k, s in enumerate(shape_out) if s == 1):
        owner = max((g for g in groups if g[1][0] < u), key=lambda g: g[1][0], default=groups[0])
        owner[1].append(u)
        owner[1].sort()
    return groups


def _commute_reshape(shape_in, shape_out, q: Perm):
    """reshape(permute(x, q), shape_out) as permute(reshape(x, shape), q2): (shape, q2), or None when the
    dims a group splits or merges are not adjacent, in order, in x."""
    groups = _groups(shape_in, shape_out)
    if groups is None:
        return None
    x_nonunit = sorted(q[i] for g in groups for i in g[0])
    rank_in_x = {d: r for r, d in enumerate(x_nonunit)}
    placed = []
    for gi, go in groups:
        ranks = [rank_in_x[q[i]] for i in gi]
        if ranks != list(range(ranks[0], ranks[0] + len(ranks))):
            return None
        placed.append((ranks[0], go))
    shape, q2 = [], [0] * len(shape_out)
    for _, go in sorted(placed):
        for k in go:
            q2[k] = len(shape)
            shape.append(shape_out[k])
    if math.prod(shape) != math.prod(shape_out) or len(shape) != len(shape_out):
        return None
    return tuple(shape), tuple(q2)
