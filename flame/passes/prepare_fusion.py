"""What the fusion pass (flame.passes.fuse) does to a graph before it partitions it into kernels: five
rewrites of the graph, and the two kinds of ops they name.
- unit_reductions: a reduction over dims of size 1 only becomes the reshape (plus +0.0) it computes;
- stage_reductions: a whole-value max or min (the `regroups` trait) of a value computed in the step,
  long enough that its one row would be split across blocks, runs in two stages: over the last dim of
  that value, which joins the kernel computing it as a second result (the amax of an FP8 cast's input
  beside the RMSNorm or SwiGLU producing it), then over the rows' results;
- drop_zero_signs: an add of +0.0 (it only turns -0.0 into +0.0) goes where every reader only
  accumulates the sum, so the sign of a zero cannot reach a result;
- move_conversions: each conversion (the `conversion` trait: cast, neg, abs) moves past views and gathers to
  the side where values are wider, so only narrow values cross kernel boundaries;
- clone_constants: each free op (is_free: a `full` constant, an `arange`, a view of a graph input or
  of such constants) gets a clone per reader, so every kernel computes its own constants and indexes inputs itself;
  so do views of a library call's result that only several views read (_fanned_views)."""

from __future__ import annotations

import math

import numpy as np

from flame.ir.graph import Graph, Op, Value, is_backward
from flame.ir.indexmap import is_reduction, is_view
from flame.ir.ops.elementwise import ADD
from flame.ir.registry import accumulates, axis_order, get, is_constant, is_fill, is_relabel, is_sign_only, regroups
from flame.ir.symbolic import SymInt
from flame.passes._rewrite import full_value, rewrite
from flame.passes.dce import eliminate_dead_code

MAX_MOVES = 8  # rounds of move_conversions: each moves a conversion past one view




def is_free(op: Op | None) -> bool:
    """Ops a kernel recomputes rather than reads: `full` constants, `arange`s (the cross-entropy
    gradient's one-hot compares one with the targets: read, its 256 KiB row came from L2 for every
    one of the logits' 8192 rows), views of graph inputs and views of those computed values."""
    if op is None:
        return False
    if is_constant(op):  # computed from the element's index alone
        return True
    return is_view(op) and all(v.producer is None or _generated(v) for v in op.inputs)


def _generated(v: Value) -> bool:
    """v is computed from the index alone: a constant op's result, or views of one (a reshaped arange)."""
    p = v.producer
    return p is not None and (is_constant(p) or (is_view(p) and all(_generated(x) for x in p.inputs)))


def is_conversion(op: Op | None, widening: bool) -> bool:
    """op is a conversion (the OpDef's `conversion` trait: cheap unary ops a kernel applies to what it
    loads or stores, rather than work worth a buffer of its own) whose element is at least as wide as
    its input's (widening: reading the input instead of the result moves no more bytes), or strictly
    narrower (not widening)."""
    if op is None or not get(op.name).conversion:
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
    return _move_conversions(g.copy())


def _move_conversions(g: Graph) -> Graph:
    """move_conversions, editing g (a copy the caller owns)."""
    moved: list[Op] = []
    for _ in range(MAX_MOVES):
        ops, subst = [], {}
        for op in g.ops:
            if subst:  # (nothing to rename before the round's first move)
                op.inputs = tuple([subst.get(v, v) for v in op.inputs])
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


def drop_zero_signs(g: Graph) -> Graph:
    """A copy of g without the adds of +0.0 whose every reader, through views and `sign_only` ops (whose
    results differ at most in the sign of a zero when an input does: -0.0 * y = -(+0.0 * y) or NaN
    either way; -0.0 + y = +0.0 + y unless y is a zero; float ones: a LoRA step scales the qkv gradient
    by alpha / r before its adapters' GEMMs), is an accumulator (the `accumulates` trait): a sum that
    starts at +0.0 never becomes -0.0 (-0.0 + +0.0 = +0.0), so whether a zero element of its input is
    -0.0 or +0.0 cannot change its result, and the add that turns one into the other is dead weight.
    It is what simplify_slabs.sum_of_slabs leaves after a sum of disjoint slabs (the gradient of
    qkv[0], qkv[1], qkv[2]); without it attention's backward writes dq, dk and dv straight into the one
    gradient buffer. Exact: no result changes by a bit."""
    return _drop_zero_signs(g.copy())


def _drop_zero_signs(g: Graph) -> Graph:
    """drop_zero_signs, editing g (a copy the caller owns)."""
    users, outputs = g.users(), set(g.outputs)
    accumulated: dict[Value, bool] = {}  # from the last op back: every reader's answer comes first
    for op in reversed(g.ops):
        accumulated[op.out] = op.out not in outputs and all(
            accumulated[u.out] if is_view(u) or (is_sign_only(u) and u.out.dtype.is_float)
            else accumulates(u) for u in users[op.out])

    renamed: dict[Value, Value] = {}
    ops: list[Op] = []
    for op in g.ops:
        if renamed:  # (nothing to rename before the first add dropped)
            op.inputs = tuple([renamed.get(v, v) for v in op.inputs])
        if op.name == ADD.name and op.out.dtype.is_float and users[op.out] and accumulated[op.out]:
            x, zero = op.inputs if _positive_zero(op.inputs[1]) else op.inputs[::-1]
            if _positive_zero(zero) and x.type == op.out.type:
                renamed[op.out] = x
                continue
        ops.append(op)
    read = {v for op in ops for v in op.inputs} | outputs
    g.ops = [op for op in ops if op.out in read or not is_fill(op)]  # the +0.0 of a dropped add
    return g


def unit_reductions(g: Graph) -> Graph:
    """g with each reduction over no dims or over dims of size 1 only (is_reduction: not argmax) replaced
    by what it computes: its input reshaped, plus +0.0 for a float sum or mean (accumulates: the
    reference's sum turns -0.0 into +0.0; a max or min keeps it). A rows kernel has no row to reduce
    for it (found by the random-graph test: a sum over no axes of a sum the kernel computes had no
    load to read). g itself when it has none."""
    def unit(op: Op) -> bool:
        if not is_reduction(op):
            return False
        shape = op.inputs[0].shape  # a 0-d tensor reduces to itself
        return not shape or all(shape[a % len(shape)] == 1 for a in op.attrs["axes"])

    if not any(unit(op) for op in g.ops):
        return g

    def rule(op: Op, b) -> Value | None:
        if not unit(op):
            return None
        x = op.inputs[0]
        y = x if x.shape == op.out.shape else b.reshape(x, shape=list(op.out.shape))
        if accumulates(op) and op.out.dtype.is_float:
            y = b.add(y, b.full(shape=[], value=0.0, dtype=op.out.dtype))
        return y

    return rewrite(g, rule)


def stage_reductions(g: Graph, splits_rows) -> Graph:
    """g with each whole-value reduction that may run in stages (registry.regroups: max, min) of a value
    y computed in the step or a graph input, read through relabelling views, permutes and conversions
    (an FP8 amax: max(abs(y.reshape(-1, k)))), split in two when its one row is one that
    `splits_rows(rows, length)` (Target.splits_rows) would split across blocks and y's own rows are
    not: the reduction of the converted y over its last dim, a row reduction that joins the kernel
    computing y (its second result, so y is read once more only by whatever else reads it), then the
    reduction of those rows' results. The order of a whole-value reduction's elements does not
    matter, so the views drop out. Of a graph input (an FP8 weight's amax) the row reduction is a
    kernel of its own, of many rows: such kernels of several weights become one launch (the
    horizontal rule) that still fills the GPU, where whole-value reductions merged so ran one block
    per weight (7 % of the copy bandwidth for a Llama block's seven weights on an H100). g itself
    when there is none."""
    def staged(op: Op) -> tuple[Value, list[Op]] | None:
        x = op.inputs[0]
        if not regroups(op) or not x.shape or any(isinstance(d, SymInt) for d in x.shape):
            return None
        rank = len(x.shape)
        if {a % rank for a in op.attrs["axes"]} != set(range(rank)) or not splits_rows(1, math.prod(x.shape)):
            return None
        y, convs = x, []
        while y.producer is not None and len(y.producer.inputs) == 1 and (
                is_relabel(y.producer) or axis_order(y.producer) is not None or get(y.producer.name).conversion):
            if get(y.producer.name).conversion:
                convs.append(y.producer)
            y = y.producer.inputs[0]
        if (y.producer is not None and is_free(y.producer)) or len(y.shape) < 2 or y.shape[-1] < 2:
            return None
        if splits_rows(math.prod(y.shape[:-1]), y.shape[-1]):
            return None
        return y, convs[::-1]

    if not any(staged(op) for op in g.ops if regroups(op)):
        return g

    def rule(op: Op, b) -> Value | None:
        got = staged(op) if regroups(op) else None
        if got is None:
            return None
        w, convs = got
        for c in convs:
            w = b.emit(c.name, w, **c.attrs)
        rows = b.emit(op.name, w, axes=[len(w.shape) - 1], keepdim=False)
        out = b.emit(op.name, rows, axes=list(range(len(rows.shape))), keepdim=False)
        return out if out.shape == op.out.shape else b.reshape(out, shape=list(op.out.shape))

    return eliminate_dead_code(rewrite(g, rule))


def _positive_zero(v: Value) -> bool:
    x = full_value(v)
    return x is not None and x == 0 and not np.signbit(x)


def _fanned_views(g: Graph, users: dict[Value, list[Op]]) -> set[Op]:
    """Views of a value no kernel computes (a matmul's or attention's result) that only several other
    views read, reindexing ones that no library call reads in turn (an interleaved rotary embedding's
    x[..., ::2] and x[..., 1::2] of the permuted projection), with the views they read in turn: cloned
    per reader like free ops, each reader's kernel indexes the value itself (a kernel of views alone,
    which its readers' kernels may not join, would copy it)."""
    out: set[Op] = set()
    for op in g.ops:
        chain, p = [], op
        while p is not None and is_view(p):
            chain.append(p)
            p = p.inputs[0].producer
        readers = users[op.out]
        if (chain and p is not None and _unfused(p) and len(readers) > 1
                and all(is_view(u) and not is_relabel(u) and not _feeds_library(u.out, users) for u in readers)):
            out.update(chain)
    return out


def _feeds_library(v: Value, users: dict[Value, list[Op]]) -> bool:
    """A library call reads v, directly or through views (it takes them as operand layouts)."""
    return any(_unfused(u) or (is_view(u) and _feeds_library(u.out, users)) for u in users[v])


def _unfused(op: Op) -> bool:
    """op is computed by no fused kernel: a library call or an opaque op."""
    opdef = get(op.name)
    return bool(opdef.library) or opdef.category == "opaque"


def _materialized_transpose(op: Op, readers: list[Op]) -> bool:
    """op is a permute of a graph input that moves its innermost dim, and a convolution reads it in
    the forward (its input is written in that order anyway) beside other forward readers."""
    order = axis_order(op)
    if not (is_free(op) and order is not None and order[-1] != len(order) - 1):
        return False
    fwd = [u for u in readers if not is_backward(u)]
    return len(fwd) > 1 and any(get(u.name).library == "conv" for u in fwd)


def clone_constants(g: Graph) -> Graph:
    """A copy of g where every free op (is_free) has at most one reader op (a clone per reader, with
    clones of the free ops it reads), so that each kernel computes its own constants and indexes inputs itself
    instead of reading them from memory — and a view shared by an opaque op and a fused kernel does
    not tie the two into a cycle (cross-entropy's labels feed both gather and the one-hot). Except a
    transposing view a convolution reads (_materialized_transpose): its forward readers share the one
    copy the convolution needs written (a ResNet's first residual add reads the channels-last input
    instead of gathering the user's NCHW batch across channels: 160 us at 42% of copy on an H100), its
    backward readers get their own (the copy is not kept alive until the backward for them)."""
    return _clone_constants(g.copy())


def _clone_constants(g: Graph) -> Graph:
    """clone_constants, editing g (a copy the caller owns)."""
    users = g.users()
    shared = {op for op in g.ops if _materialized_transpose(op, users[op.out])}
    fanned = _fanned_views(g, users)
    ops: list[Op] = []

    free: dict[Op | None, bool] = {}  # is_free per op, asked once (a clone is free as its original is)

    def cloned(p: Op | None) -> bool:
        got = free.get(p)
        if got is None:
            got = free[p] = is_free(p)
        return got or p in fanned

    def clone(v: Value) -> Value:  # v's free producer, and the free ops it reads, copied for one reader
        p = v.producer
        c = Op(p.name, tuple(clone(x) if cloned(x.producer) else x for x in p.inputs), p.attrs, v.type, p.loc)
        ops.append(c)
        return c.out

    outputs = set(g.outputs)
    for op in g.ops:
        if cloned(op) and len(users[op.out]) > 1 and op not in shared and op.out not in outputs:
            continue  # its readers get clones (a returned one stays too)
        new_inputs = []
        for v in op.inputs:
            p = v.producer
            if cloned(p) and len(users[v]) > 1 and not (p in shared and not is_backward(op)):
                v = clone(v)
            new_inputs.append(v)
        op.inputs = tuple(new_inputs)
        ops.append(op)
    read, live = set(outputs), []
    for op in reversed(ops):  # a free op that only the originals of clones read goes
        if not cloned(op) or op.out in read:
            live.append(op)
            read.update(op.inputs)
    g.ops = live[::-1]
    return g


def prepare(g: Graph) -> Graph:
    """drop_zero_signs, move_conversions and clone_constants, in that order, on one copy of g (each
    alone copies g; the fusion pass runs all three). g is not modified."""
    return _clone_constants(_move_conversions(_drop_zero_signs(g.copy())))
