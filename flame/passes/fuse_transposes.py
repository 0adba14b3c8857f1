"""Transposed copies for GEMMs that read operands only as they are stored (passes/fuse.py, a rule after
partitioning): a permute that moves the innermost dim of a value, kept in a kernel of its own because
such a GEMM reads it (the `reads_transposed` fact is false for it: FP8 training's fp8_matmul, whose
backward reads w8^T and g8^T), joins the elementwise kernel computing that value when that kernel
computes pointwise values of one tensor (and 0-d values) and writes only values of that tensor's shape.
The kernel then writes the value in its own layout and transposed, and codegen renders it as one tiled
transpose (codegen/transpose.lower_tiled_map): the source is read once, the value written as the tile
fills and its transpose through shared memory, instead of a cast kernel and a transpose of its result.

Such a kernel stays out of horizontal merges (`writes_transposed`): a merged launch would be the
elementwise kernel, writing the transposed value at a stride. A permute of the forward's value read in
the backward (a weight's w8^T, an input's x8^T) is then written in the forward: the backward keeps the
transposed copy instead of the value, the same bytes; where the backward reads the value too, the
permute stays in the backward (both would be kept)."""

from __future__ import annotations

from flame.ir.graph import Kind, Op, Value, is_backward
from flame.ir.registry import axis_order, get, is_matmul, reads_transposed
from flame.passes.fusion_state import Group, State, merge, mixes_phases


def pair_transposes(st: State) -> None:
    """Each kernel that is one permute moving the innermost dim of a value, read only by GEMMs that take
    their operands as stored, joins the kernel computing that value where that one is pointwise over one
    tensor (module docstring)."""
    for grp in list(st.groups):
        if grp not in st.groups or len(grp.ops) != 1 or not _stored_transpose(st, grp.ops[0]):
            continue
        perm = grp.ops[0]
        src = st.group_of.get(perm.inputs[0].producer)
        if src is None or src is grp or src.kind != Kind.ELEMENTWISE or not _pointwise(st, src, perm.inputs[0]):
            continue
        if mixes_phases(src.ops + [perm]) or _kept_beside(st, src, perm):
            continue
        merge(st, src, grp)


def _stored_transpose(st: State, op: Op) -> bool:
    """op is a permute moving the innermost dim, read only by GEMMs that read operands as stored."""
    order = axis_order(op)
    users = st.users[op.out]
    return (
        order is not None
        and order[-1] != len(order) - 1
        and op.out not in st.outs
        and bool(users)
        and all(is_matmul(u) and not reads_transposed(u) for u in users)
    )


def _kept_beside(st: State, src: Group, perm: Op) -> bool:
    """perm is backward work on a value a forward kernel computes, which the backward also reads as it
    is: joined, the transposed copy would be written in the forward and kept beside the value until
    the backward (written there, it lives only while its GEMMs run)."""
    v = perm.inputs[0]
    return (
        is_backward(perm)
        and any(not is_backward(op) for op in src.ops)
        and any(is_backward(u) for u in st.users[v] if u is not perm)
    )


def _pointwise(st: State, grp: Group, v: Value) -> bool:
    """grp computes v and its other values pointwise from one tensor of v's shape and 0-d values, and
    writes only values of v's shape (what codegen/transpose.lower_tiled_map renders)."""
    inside = {op.out for op in grp.ops}
    sources = set()
    for op in grp.ops:
        opdef = get(op.name)
        if (
            opdef.category != "elementwise"
            or opdef.view is not None
            or opdef.positional
            or op.out.shape not in ((), v.shape)
        ):
            return False
        for x in op.inputs:
            if x.shape not in ((), v.shape):
                return False
            if x not in inside and x.shape != ():
                sources.add(x)
    return len(sources) == 1 and all(x.shape == v.shape for x in st.exposed(grp.ops))


def writes_transposed(st: State, grp: Group) -> bool:
    """grp writes a value and its transposed copy for such a GEMM (pair_transposes made it, or the
    vertical rule did): a tiled kernel of its own."""
    inside = {op.out for op in grp.ops}
    return any(op.inputs and op.inputs[0] in inside and _stored_transpose(st, op) for op in grp.ops)
