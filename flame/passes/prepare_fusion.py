"""What the fusion pass (flame.passes.fuse) does to a graph before it partitions it into kernels: three
rewrites of the graph, and the two kinds of ops they name.
- drop_zero_signs: an add of +0.0 (it only turns -0.0 into +0.0) goes where every reader only
  accumulates the sum, so the sign of a zero cannot reach a result;
- move_conversions: each conversion (CONVERSIONS: cast, neg, abs) moves past views and gathers to
  the side where values are wider, so only narrow values cross kernel boundaries;
- clone_constants: each free op (is_free: a `full` constant, a view of a graph input) gets a clone per
  reader, so every kernel computes its own constants and indexes inputs itself."""

from __future__ import annotations

import numpy as np

from flame.ir.graph import Graph, Op, Value
from flame.ir.indexmap import is_view
from flame.ir.registry import get
from flame.passes._rewrite import full_value
from flame.passes.autodiff import is_backward

# conversions: cheap unary elementwise ops a kernel applies to what it loads or stores, rather than
# work worth a buffer of its own (move_conversions, _recompute_conversions)
CONVERSIONS = frozenset({"cast", "neg", "abs"})
MAX_MOVES = 8  # rounds of move_conversions: each moves a conversion past one view


def is_free(op: Op | None) -> bool:
    """Ops a kernel recomputes rather than reads: `full` constants and views of graph inputs."""
    return op is not None and (op.name == "full" or (is_view(op) and all(v.producer is None for v in op.inputs)))


def is_conversion(op: Op | None, widening: bool) -> bool:
    """op is a conversion (CONVERSIONS) whose element is at least as wide as its input's (widening:
    reading the input instead of the result moves no more bytes), or strictly narrower (not widening)."""
    if op is None or op.name not in CONVERSIONS:
        return False
    return (op.out.dtype.itemsize >= op.inputs[0].dtype.itemsize) == widening


def _swap(op: Op) -> list[Op] | None:
    """op and the conversion next to it in the other order (see move_conversions), or None."""
    data = op.inputs[0] if op.inputs else None
    u = data.producer if data is not None else None
    if (is_view(op) or get(op.name).selects) and is_conversion(u, widening=True):  # r(u(x)) -> u(r(x))
        x = u.inputs[0]
        moved = Op(op.name, (x, *op.inputs[1:]), op.attrs, op.out.type.with_dtype(x.dtype), op.loc)
        # a forward conversion now computed after a backward view is backward work (same mark as op's)
        loc = type(op.loc)(u.loc or "") if is_backward(op) and not is_backward(u) else u.loc
        return [moved, Op(u.name, (moved.out,), u.attrs, op.out.type, loc)]
    view = get(u.name).view if u is not None else None
    if is_conversion(op, widening=False) and view is not None and view.relabel and u.inputs[0].producer is not None:
        y = u.inputs[0]  # u(r(y)) -> r(u(y)), with op the conversion and u the view
        narrow = Op(op.name, (y,), op.attrs, y.type.with_dtype(op.out.dtype), op.loc)
        return [narrow, Op(u.name, (narrow.out,), u.attrs, op.out.type, u.loc)]
    return None


def move_conversions(g: Graph) -> Graph:
    """A copy of g where each conversion sits on the side of its views where values are wider, so
    that a kernel computing with the wide values converts in registers and only narrow values cross
    kernel boundaries (a view that does not map into a kernel's domain, a reshape merging dims, is a
    boundary; a gather is a kernel of its own):
    - a view or selection (gather) of a widening conversion reads the conversion's input instead,
      r(u(x)) -> u(r(x)): the readers convert what they load (a cross-entropy of bf16 logits.float():
      the row kernel and the gather read the bf16 logits, no f32 copy is written);
    - a narrowing conversion of a relabelling view (reshape) of a computed value converts the value
      itself, u(r(y)) -> r(u(y)): the kernel computing y writes the narrow result (the f32 gradient
      of bf16 logits is written as bf16 by the row kernel), which the view relabels.
    Both are exact: an elementwise op commutes with moving elements. g is not modified."""
    g = g.copy()
    moved: list[Op] = []
    for _ in range(MAX_MOVES):
        ops, subst = [], {}
        for op in g.ops:
            op.inputs = tuple(subst.get(v, v) for v in op.inputs)
            pair = _swap(op)
            if pair is None:
                ops.append(op)
                continue
            ops += pair
            subst[op.out] = pair[-1].out
            moved.append(op.inputs[0].producer)
        g.ops, g.outputs = ops, [subst.get(v, v) for v in g.outputs]
        if not subst:
            break
    while moved:  # drop what the moves left unread
        users, outs = g.users(), set(g.outputs)
        dead = {op for op in moved if op in g.ops and not users[op.out] and op.out not in outs}
        g.ops = [op for op in g.ops if op not in dead]
        moved = [v.producer for op in dead for v in op.inputs if v.producer is not None]
    return g


ACCUMULATORS = frozenset({"matmul", "reduce_sum", "reduce_mean"})  # accumulators start at +0.0


def drop_zero_signs(g: Graph) -> Graph:
    """A copy of g without the adds of +0.0 whose every reader, through views, is an accumulator
    (ACCUMULATORS): a sum that starts at +0.0 never becomes -0.0 (-0.0 + +0.0 = +0.0), so whether a
    zero element of its input is -0.0 or +0.0 cannot change its result, and the add that turns one
    into the other is dead weight. It is what simplify_slabs.sum_of_slabs leaves after a sum of
    disjoint slabs (the gradient of qkv[0], qkv[1], qkv[2]); without it attention's backward writes
    dq, dk and dv straight into the one gradient buffer. Exact: no result changes by a bit."""
    g = g.copy()
    users, outputs = g.users(), set(g.outputs)

    def accumulated(v: Value) -> bool:
        if v in outputs:
            return False
        return all(accumulated(u.out) if is_view(u) else u.name in ACCUMULATORS for u in users[v])

    renamed: dict[Value, Value] = {}
    ops: list[Op] = []
    for op in g.ops:
        op.inputs = tuple(renamed.get(v, v) for v in op.inputs)
        if op.name == "add" and op.out.dtype.is_float and users[op.out] and accumulated(op.out):
            x, zero = op.inputs if _positive_zero(op.inputs[1]) else op.inputs[::-1]
            if _positive_zero(zero) and x.type == op.out.type:
                renamed[op.out] = x
                continue
        ops.append(op)
    read = {v for op in ops for v in op.inputs} | outputs
    g.ops = [op for op in ops if op.out in read or op.name != "full"]  # the +0.0 of a dropped add
    return g


def _positive_zero(v: Value) -> bool:
    x = full_value(v)
    return x is not None and x == 0 and not np.signbit(x)


def _materialized_transpose(op: Op, readers: list[Op]) -> bool:
    """op is a permute of a graph input that moves its innermost dim, and a convolution reads it in
    the forward (its input is written in that order anyway) beside other forward readers."""
    if not (is_free(op) and op.name == "permute" and op.attrs["perm"][-1] != len(op.attrs["perm"]) - 1):
        return False
    fwd = [u for u in readers if not is_backward(u)]
    return len(fwd) > 1 and any(get(u.name).library == "conv" for u in fwd)


def clone_constants(g: Graph) -> Graph:
    """A copy of g where every free op (`full`, a view of a graph input) has at most one reader op (a
    clone per reader), so that each kernel computes its own constants and indexes inputs itself
    instead of reading them from memory — and a view shared by an opaque op and a fused kernel does
    not tie the two into a cycle (cross-entropy's labels feed both gather and the one-hot). Except a
    transposing view a convolution reads (_materialized_transpose): its forward readers share the one
    copy the convolution needs written (a ResNet's first residual add reads the channels-last input
    instead of gathering the user's NCHW batch across channels: 160 us at 42% of copy on an H100), its
    backward readers get their own (the copy is not kept alive until the backward for them)."""
    g = g.copy()
    users = g.users()
    shared = {op for op in g.ops if _materialized_transpose(op, users[op.out])}
    ops: list[Op] = []
    for op in g.ops:
        if is_free(op) and len(users[op.out]) > 1 and op not in shared:
            continue
        new_inputs = []
        for v in op.inputs:
            p = v.producer
            if is_free(p) and len(users[v]) > 1 and not (p in shared and not is_backward(op)):
                clone = Op(p.name, p.inputs, p.attrs, v.type, p.loc)
                ops.append(clone)
                v = clone.out
            new_inputs.append(v)
        op.inputs = tuple(new_inputs)
        ops.append(op)
    kept = {op.out for op in ops}
    for op in g.ops:  # a shared free value that is also returned keeps its op
        if op.out not in kept and op.out in set(g.outputs):
            ops.insert(0, op)
    g.ops = ops
    return g
