"""The fusion pass: partition a graph's ops into kernels (FusionGroups) and record why each kernel
boundary exists (ARCHITECTURE.md "Named kernels"). Only fusions whose math is the op-by-op math are made: a fused
kernel evaluates the same ops on the same operands and rounds every intermediate to its dtype.

Rules, in the order they apply:
- conversions (the OpDef trait `conversion`: cast, neg, abs) first move past views and
  gathers to the side where values are wider (prepare_fusion.move_conversions), so only narrow values
  cross kernel boundaries: the readers of bf16 logits' .float() convert what they load, a reshaped f32
  gradient cast to bf16 is converted by the kernel computing it; a widening conversion that several
  fusible kernels read is recomputed in each of them (_recompute_conversions: its result is never
  written; a backward kernel's copy is a recomputation and the narrow input is what the forward saves);
- vertical: an elementwise or view op joins the kernel of an operand's producer when every value of
  that kernel maps affinely into one iteration domain (flame.ir.indexmap); several results may leave
  one kernel (multi-output);
- rows: a reduction over the innermost dims joins its elementwise prologue; consumers that use the
  per-row result (also broadcast back over the row) join as epilogue, so softmax, log_softmax,
  layer_norm, rms_norm and a cross-entropy's row part are one kernel each (codegen keeps rows of up
  to Target.row_cache elements in registers and streams longer rows in several passes); a row domain
  read through a permute (GroupNorm over channels-last data) stores its results in their own order
  (indexmap._onto), except where that would copy a view or a matmul's operand (_copied_view);
- scalars: 0-d work (step counters, bias corrections) forms scalar kernels; one read by a single
  kernel is absorbed into it;
- horizontal: independent kernels doing the same work (same op sequence, views aside) become one
  launch with one segment each (e.g. the AdamW update of every parameter): elementwise ones while
  their pointers fit the kernel's parameter space (Target.kernel_param_bytes; codegen shares one
  body among segments that differ only in their pointers), scalar and row ones at most MAX_SEGMENTS;
- updates (Target.side_stream): a kernel that only writes parameters or optimizer state in place
  (fusion_state.updates_only: an optimizer's update) is launched as soon as what it reads is final
  and every other reader of what it overwrites has run, so the plan can issue it on the side stream
  while the rest of the backward runs; horizontal fusion merges only updates that become ready after
  the same library calls (off by default: runtime/backend.side_stream_enabled says why);
- matmul: stays a library call; matmul_bias (PyTorch's linear and addmm: the bias added before the
  one rounding) is one with its bias epilogue; a bias add over the last dim of an f32 product (where
  adding before or after rounding the product is the same) and a relu or tanh-GELU that only it
  feeds are marked as its epilogue when the target's library runs that epilogue
  (Target.matmul_epilogues; the plan builder still falls back to a kernel when the runtime it builds
  for cannot); a GELU whose pre-activation the backward reads writes it as the call's aux result;
  a column sum over k of an operand (a bias gradient) joins the call as its BGRAD epilogue, before
  rows kernels take column sums (carrying one keeps a row kernel off its vectorised schedule: the
  MLP's cross-entropy kernel ran at 40% of copy so);
- attention: stays a library call; an attention forward and its softmax statistics (the op autodiff
  saves for the backward, same inputs and attributes) are one call that writes both; views only
  attention calls read stay out of the kernel computing their input (the call reads q, k and v
  through strides from the one value it stores: _attention_operand);
- `full` constants, `arange`s and views of graph inputs (or of those constants) are cloned into every
  kernel that reads them (prepare_fusion.clone_constants), and computed there from the index;
- phases: an op the remat pass recomputes in the backward never shares a kernel with a forward op
  (the kernel would run in the forward and keep the value alive again); nor does a backward op whose
  result leaves the kernel at the kernel's full size (ReLU's mask `y > 0`: computed in the forward,
  it would be an activation kept until the backward that the remat pass never chose to keep; in
  the backward kernel that reads it, it costs nothing); smaller backward results (per-channel
  factors) may ride along;
- siblings: a kernel holding recomputed ops joins a backward kernel reading a value it reads over the
  same domain (the GELU output recomputed in the GELU backward's kernel);
- columns: a column reduction (sum/mean over the leading dims) of a value a rows kernel computes or
  reads over its whole domain rides along in that kernel (per-thread partials, then a short fold);
  so do two or more whose result dims are other domain dims (a GroupNorm backward's dweight and
  dbias over channels-last data: per group and channel in the group; indexmap.column_map); a
  narrowing conversion that alone reads such a sum (a bf16 LayerNorm's f32 dweight rounded to bf16)
  joins it, and the fold stores the converted result (fuse_columns.store_conversions): the update
  then reads a gradient of the parameter's dtype, like every other parameter's, and merges with them;
- traffic (passes/fuse_traffic.py): a big kernel's costly work on broadcast values (a BatchNorm's
  per-channel rsqrt) runs once per value in a small kernel of its own; a full-size value a kernel
  writes only for other kernels is recomputed in them when that reads fewer bytes (a BatchNorm
  backward's dy * scale, f32, from the bf16 dy and ReLU output it comes from); an elementwise kernel
  that alone reads what it reads of a rows kernel joins it (a delayed-scaling FP8 cast, absorb_readers);
- few long rows (Target.splits_rows; a whole-tensor reduction is one row): codegen splits each row
  across blocks, so what reads a reduced value leaves the group (its own kernel, reason recorded);
  the prologue and its per-element results (a loss's gradient) stay fused;
- piecewise ops (the OpDef trait `pieces`: concat, pad) are elementwise: a kernel computes each
  element from the one input its region reads, through that piece's map (a select between index
  maps), so a rotary embedding's `cat([-x2, x1])` of halves and a slice's gradient (a pad) join
  their neighbours; not in row kernels;
- transposed copies (passes/fuse_transposes.py): a permute an FP8 GEMM reads (stored transposed) joins the
  pointwise kernel computing its input, which writes both as one tiled kernel (a cast and its transpose);
Not fused: other column reductions (their own tuned kernel), gather/scatter/argmax (opaque).

The groups while they form and the checks every rule shares live in passes/fusion_state.py; the rules
after partitioning that place column sums, bias gradients and recomputations in passes/fuse_columns.py."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Container

from flame.ir.graph import FusionGroup, Graph, Kind, Op, Value
from flame.ir.indexmap import is_reduction, is_view, trailing_reduced
from flame.ir.ops.attention import FORWARD, STATS
from flame.ir.registry import epilogue_role, gemm_bias, get, is_fill
from flame.passes import remat
from flame.passes.fuse_columns import (
    absorb_bias_grads,
    absorb_columns,
    absorb_recomputations,
    column_kernels,
    columns_of,
    is_bias_grad,
    store_conversions,
)
from flame.passes.fuse_traffic import absorb_readers, hoist_broadcasts, recompute_in, recompute_tails
from flame.passes.fuse_transposes import pair_transposes, writes_transposed
from flame.passes.fusion_state import (
    Buffers,
    Closure,
    Group,
    Peers,
    State,
    fit,
    hoists_backward,
    merge,
    mixes_phases,
    rows_shape,
    updates_only,
)
from flame.passes.prepare_fusion import (
    is_conversion,
    is_free,
    prepare,
    stage_reductions,
    unit_reductions,
)
from flame.target import DEFAULT_TARGET, Target

MAX_SEGMENTS = 32  # segments of a horizontal scalar or row kernel: its source grows with each
_FUSIBLE = (Kind.ELEMENTWISE, Kind.SCALAR, Kind.ROWS)
# ops of a kernel grown by joining readers and merging producers (the largest of a GPT, Llama or U-Net step
# holds about 40): a chain thousands of ops long (a recurrence unrolled by a Python loop) becomes kernels of
# at most this many, so fusing it stays linear in its length and NVRTC compiles sources of bounded size
MAX_KERNEL_OPS = 128


def _free_chains(st: State, op: Op) -> list[list[Op]]:
    """Per free op that op reads and no kernel holds yet: it and the free ops it reads in turn (a
    reshaped `arange`), producers first."""
    held = st.group_of  # (asked first: most operands' producers are placed, and is_free walks their inputs)
    roots = dict.fromkeys(v.producer for v in op.inputs if v.producer not in held and is_free(v.producer))
    return [list(dict.fromkeys(_chain(st, p))) for p in roots]


def _chain(st: State, p: Op) -> list[Op]:
    """p and the free ops no kernel holds that it reads in turn, producers first (a module function:
    a recursive closure per call would be a reference cycle for the collector, one per op placed)."""
    return [c for x in p.inputs if x.producer not in st.group_of and is_free(x.producer)
            for c in _chain(st, x.producer)] + [p]


def _constants(st: State, op: Op) -> list[Op]:
    """The free ops op reads, directly or through other free ops, that no kernel holds yet."""
    return list(dict.fromkeys(c for ch in _free_chains(st, op) for c in ch))


def _try_join(st: State, grp: Group, op: Op) -> bool:
    ins = {st.group_of[v.producer] for v in op.inputs if v.producer in st.group_of} - {grp}
    if st.reaches_any((grp,), ins):
        return st.refuse(grp, op, "joining would make a cycle: the reader also reads a kernel that reads this one")
    if len(grp.ops) >= MAX_KERNEL_OPS:
        return st.refuse(grp, op, f"the kernel holds {len(grp.ops)} ops already (at most {MAX_KERNEL_OPS})")
    joined = _constants(st, op) + [op]
    ops = st.sorted_ops(grp.ops + joined)
    domain, n_red = grp.domain, grp.n_red
    if is_reduction(op):
        n_red = trailing_reduced(op)
        if grp.kind == Kind.ROWS and (grp.domain != op.inputs[0].shape or grp.n_red != n_red):
            return st.refuse(grp, op, f"a reduction of {list(op.inputs[0].shape)} over its last {n_red} dim(s) in a "
                                      f"kernel reducing {list(grp.domain)} over its last {grp.n_red}")
        domain = op.inputs[0].shape
        got = fit(st, ops, Kind.ROWS, domain, n_red)
    else:
        got = fit(st, ops, grp.kind if grp.kind == Kind.ROWS else Kind.ELEMENTWISE, domain, n_red)
    if isinstance(got, str):
        return st.refuse(grp, op, got)
    for c in joined:
        st.group_of[c] = grp
    grp.ops = ops
    st.placed(grp, joined)
    grp.domain, grp.n_red = got
    if is_reduction(op):
        grp.kind = Kind.ROWS
    return True


def _classify(op: Op, target: Target) -> Kind:
    opdef = get(op.name)
    if opdef.library:
        return Kind(opdef.library)  # each library call is its own kind
    if is_reduction(op):
        return Kind.ROWS if trailing_reduced(op) is not None else Kind.REDUCTION
    if opdef.category == "elementwise" or opdef.view is not None or opdef.pieces is not None and target.fused_pieces:
        small = math.prod(op.out.shape) == 1 and all(math.prod(v.shape) == 1 for v in op.inputs)
        return Kind.SCALAR if small else Kind.ELEMENTWISE
    return Kind.OPAQUE


# (epilogue so far, the activation's epilogue role) -> the epilogue with the activation; GELU only in its tanh form
_ACTIVATIONS = {("none", "relu"): "relu", ("bias", "relu"): "bias_relu", ("none", "gelu"): "gelu",
                ("bias", "gelu"): "bias_gelu"}
AUX_ALIGN = 8  # cuBLASLt's GELU aux (the pre-activation) has a leading dimension that is a multiple of 8


def _epilogue(st: State, grp: Group, op: Op) -> str | None:
    """The epilogue `op` adds to matmul group grp, or None: add of a bias [n] (size-1 dims aside)
    broadcast over the rows of an f32 product, then relu or tanh-GELU. The intermediate has no other
    user and is not returned, except before a GELU: then it is written as the call's second result (the
    aux). An f16/bf16 product is rounded before a bias add of its own: the epilogue, adding to the f32
    accumulator, would round once (matmul_bias is the op that does)."""
    last = grp.ops[-1].out
    if mixes_phases([*grp.ops, op]) or last.dtype.name not in ("f32", "f16", "bf16"):
        return None
    private = st.users[last] == [op] and last not in st.outs
    role = epilogue_role(op)
    if role in ("relu", "gelu"):
        epi = _ACTIVATIONS.get((grp.epilogue, role))
        if epi is None or (role == "gelu" and op.attrs["approximate"] != "tanh"):
            return None
        if not private:  # the pre-activation is read later (the backward): GELU can write it as aux
            if role != "gelu" or last.shape[-1] % AUX_ALIGN:
                return None
            epi += "_aux"
        return epi if epi in st.target.matmul_epilogues else None
    if not private or role != "bias" or grp.epilogue != "none" or op.out.type != last.type:
        return None
    if "bias" not in st.target.matmul_epilogues or last.dtype.itemsize < 4:
        return None
    bias = op.inputs[1] if op.inputs[0] is last else op.inputs[0]
    n = last.shape[-1]
    squeezed = [s for s in bias.shape if s != 1]
    ok = bias is not last and bias.shape[-1:] == (n,) and squeezed == [n] and bias.dtype == last.dtype
    return "bias" if ok else None


def _attention_operand(st: State, v: Value) -> bool:
    """Only attention calls read v, directly or through views (q, k and v sliced out of a fused
    projection): the call reads them through strides from the stored value."""
    users = st.users.get(v, ())
    return bool(users) and v not in st.outs and all(
        get(u.name).library == "attention" or (is_view(u) and _attention_operand(st, u.out)) for u in users)


def _place(st: State, op: Op) -> None:
    kind = _classify(op, st.target)
    if is_view(op) and op.inputs[0].producer in st.group_of and _attention_operand(st, op.out):
        # not joined to the kernel computing its input, which would write q, k and v transposed (a LoRA
        # step's qkv, base + scaled adapter: 160 us at 24% of copy on an H100) instead of the one value
        st.new([op], Kind.ELEMENTWISE, domain=op.out.shape)
        return
    producers = [st.group_of[v.producer] for v in op.inputs if v.producer in st.group_of]
    for grp in dict.fromkeys(reversed(producers)):
        if grp.kind == Kind.MATMUL:
            epi = _epilogue(st, grp, op)
            if epi is not None and not st.reaches_any((grp,), (h for h in producers if h is not grp)):
                grp.ops.append(op)
                st.group_of[op] = grp
                st.placed(grp, [op])
                grp.epilogue = epi
                return
        ok_kinds = (Kind.SCALAR, Kind.ROWS) if kind == Kind.SCALAR else (Kind.ELEMENTWISE, Kind.ROWS)
        if kind in (Kind.SCALAR, Kind.ELEMENTWISE, Kind.ROWS) and grp.kind in ok_kinds and _try_join(st, grp, op):
            for other in dict.fromkeys(producers):
                if other is not grp and other in st.groups and other.kind in ok_kinds:
                    _try_merge(st, grp, other)
            return
    if kind in (Kind.SCALAR, Kind.ELEMENTWISE, Kind.ROWS):
        chains = _free_chains(st, op)
        free = list(dict.fromkeys(c for ch in chains for c in ch))
        domain, n_red = (op.inputs[0].shape, trailing_reduced(op)) if kind == Kind.ROWS else (op.out.shape, 0)
        fkind = kind if kind == Kind.ROWS else Kind.ELEMENTWISE
        if free and isinstance(fit(st, st.sorted_ops(free + [op]), fkind, domain, n_red), str):
            # a view that does not map into op's domain: its own kernel; the free ops that do map stay
            kept: list[Op] = []
            for ch in chains:
                if not isinstance(fit(st, st.sorted_ops(kept + ch + [op]), fkind, domain, n_red), str):
                    kept += [c for c in ch if c not in kept]
            for f in free:
                if f not in kept:
                    st.new([f], Kind.ELEMENTWISE, domain=f.out.shape)
            free = kept
        grp = st.new(free + [op], kind, domain=domain)
        grp.n_red = n_red
        if kind == Kind.ROWS:
            _take_views(st, grp, op)
        return
    for c in _constants(st, op):
        st.new([c], Kind.ELEMENTWISE, domain=c.out.shape)
    if kind == Kind.ATTENTION and _join_attention(st, op):
        return
    st.new([op], kind, epilogue="bias" if gemm_bias(op) is not None else "none")


def _take_views(st: State, grp: Group, op: Op) -> None:
    """A row reduction that could not join the elementwise kernel computing its input takes the views
    it reads that input through (a GroupNorm's reshape and permute over channels-last data) out of
    that kernel into its own new rows kernel `grp`, where nothing else of that kernel reads them: the
    kernel then writes the value they view, not a copy of it in the view's shape beside it."""
    for v in op.inputs:
        views: list[Op] = []
        p = v.producer
        while p is not None and is_view(p) and st.group_of.get(p) is not None and all(
                st.group_of.get(u) is None or u in views or u is op for u in st.users[p.out]):
            views.append(p)
            p = p.inputs[0].producer
        src = st.group_of.get(views[-1]) if views else None
        if src is None or src.kind != Kind.ELEMENTWISE or any(st.group_of[w] is not src for w in views):
            continue
        rest = [o for o in src.ops if o not in views]
        if not any(not is_free(o) for o in rest):
            continue
        mine = st.sorted_ops(views + grp.ops)
        got, kept = fit(st, mine, Kind.ROWS, grp.domain, grp.n_red), fit(st, rest, Kind.ELEMENTWISE)
        if isinstance(got, str) or isinstance(kept, str):
            continue
        src.ops, (src.domain, src.n_red) = rest, kept
        grp.ops = mine
        for w in views:
            st.group_of[w] = grp
        st.placed(grp, views)


def _same_value(a: Value, b: Value) -> bool:
    """a is b, or both are clones of one free op (`clone_constants` gives each reader its own)."""
    pa, pb = a.producer, b.producer
    return a is b or (is_free(pa) and is_free(pb) and (pa.name, pa.attrs, pa.inputs) == (pb.name, pb.attrs, pb.inputs))


def _join_attention(st: State, op: Op) -> bool:
    """Join an attention forward and its softmax statistics (the same inputs and attributes, in one
    phase) into one group: one library call writes both (ir/ops/attention.py)."""
    for grp in reversed(st.groups):
        if grp.kind != Kind.ATTENTION or len(grp.ops) != 1 or mixes_phases([grp.ops[0], op]):
            continue
        other = grp.ops[0]
        fwd, stats = (other, op) if other.name == FORWARD else (op, other)
        if ({fwd.name, stats.name} == {FORWARD, STATS} and fwd.attrs == stats.attrs
                and len(fwd.inputs) == len(stats.inputs) and all(map(_same_value, fwd.inputs, stats.inputs))):
            grp.ops = st.sorted_ops([other, op])
            st.group_of[op] = grp
            st.placed(grp, [op])
            return True
    return False


def _try_merge(st: State, dst: Group, src: Group) -> None:
    """Merge producer kernel src into dst (which reads it) when no third kernel sits between them."""
    if st.reaches_any([k for k in st.succ(src) if k is not dst], (dst,)) or st.reaches(dst, src):
        return
    if src.kind == Kind.ROWS and dst.kind == Kind.ROWS and (src.domain, src.n_red) != (dst.domain, dst.n_red):
        return
    if len(src.ops) + len(dst.ops) > MAX_KERNEL_OPS:
        return
    kind = Kind.ROWS if Kind.ROWS in (src.kind, dst.kind) else Kind.ELEMENTWISE
    rows = dst if dst.kind == Kind.ROWS else src
    got = fit(st, st.sorted_ops(src.ops + dst.ops), kind, rows.domain, rows.n_red)
    if not isinstance(got, str):
        merge(st, dst, src)
        dst.kind = kind if dst.kind != Kind.SCALAR else dst.kind
        dst.domain, dst.n_red = got


def _recorded_kind(grp: Group) -> Kind:
    """The kind codegen lowers a group by: a scalar kernel is an elementwise one, unless it absorbed a
    reduction (a whole-tensor sum feeding 0-d work), which makes it a rows kernel of one row."""
    if grp.kind == Kind.SCALAR:
        return Kind.ROWS if grp.n_red else Kind.ELEMENTWISE
    return grp.kind


def _absorb_scalars(st: State) -> None:
    """A scalar kernel whose results only one other fusible kernel reads joins that kernel."""
    for s in [grp for grp in st.groups if grp.kind == Kind.SCALAR]:
        users = st.succ(s)
        if len(users) != 1 or any(v in st.outs for v in st.exposed(s.ops)):
            continue
        (dst,) = users
        if dst.kind not in (Kind.ELEMENTWISE, Kind.ROWS):
            continue
        ops = st.sorted_ops(s.ops + dst.ops)
        got = fit(st, ops, dst.kind, dst.domain, dst.n_red)
        if not isinstance(got, str):
            merge(st, dst, s)
            dst.domain, dst.n_red = got


def _recompute_conversions(st: State) -> None:
    """A widening conversion (a bf16 value's .float()) that kernels other than its own read is
    recomputed in each of them from its narrower input, as long as they all are fusible kernels: the
    f32 copy is never written, and a backward kernel reading it reads the saved bf16 value (the clone
    is then backward work, a RecomputeLoc). Its own kernel keeps it if it still reads it."""
    for grp in list(st.groups):
        for u in [op for op in grp.ops if is_conversion(op, widening=True) and op.out not in st.outs]:
            if st.group_of.get(u) is not grp:
                continue
            outside = list(dict.fromkeys(st.group_of[r] for r in st.users[u.out] if st.group_of.get(r) is not grp))
            if not outside or any(h.kind not in _FUSIBLE for h in outside):
                continue
            undo: list = []
            if all(recompute_in(st, [u], u.out, h, undo) for h in outside) and _settle(st, grp, u, undo):
                continue
            for step in reversed(undo):
                step()


def _settle(st: State, grp: Group, u: Op, undo: list) -> bool:
    """After u's readers elsewhere got their copies: take u out of its kernel grp when nothing reads
    it any more, and check that grp and the kernel computing u's input (which now writes it) still
    fit; False when one does not."""
    x = u.inputs[0].producer
    touched = [grp] + ([st.group_of[x]] if x in st.group_of and st.group_of[x] is not grp else [])
    before = [(k, list(k.ops), k.domain, k.n_red) for k in touched]
    x_users = list(st.users[u.inputs[0]])

    def take_back():
        for k, ops, domain, n_red in before:
            k.ops, k.domain, k.n_red = ops, domain, n_red
            if k not in st.groups:
                st.groups.append(k)
        st.group_of[u] = grp
        st.users[u.inputs[0]] = x_users

    undo.append(take_back)
    if not st.users[u.out]:
        grp.ops = [op for op in grp.ops if op is not u]
        st.users[u.inputs[0]] = [r for r in x_users if r is not u]
        del st.group_of[u]
        if not grp.ops:
            st.groups.remove(grp)
    for k in touched:
        if k.ops and k.kind in _FUSIBLE:
            got = fit(st, k.ops, k.kind if k.kind == Kind.ROWS else Kind.ELEMENTWISE, k.domain, k.n_red)
            if isinstance(got, str):
                return False
            k.domain, k.n_red = got
    return True


def _after_reductions(grp: Group) -> list[Op]:
    """The ops of a rows group that read a reduction's result (directly or through other ops), with
    the free ops (constants, input views) only they read."""
    dep = {op.out for op in grp.ops if is_reduction(op)}
    moved = []
    for op in grp.ops:
        if any(v in dep for v in op.inputs):
            dep.add(op.out)
            moved.append(op)
    readers = set(moved)
    return [op for op in grp.ops if op in readers or (is_free(op) and _read_only_by(grp, op, readers))]


def _read_only_by(grp: Group, op: Op, readers: set[Op]) -> bool:
    return any(op.out in r.inputs for r in readers) and not any(
        op.out in o.inputs for o in grp.ops if o not in readers)


def _split_few_rows(st: State) -> None:
    """A rows group with few long rows (Target.splits_rows) runs split across blocks, which needs
    every op of it to be computable chunk by chunk: the ops reading a reduced value (an epilogue
    such as softmax's normalisation, or a second reduction such as layer_norm's variance) move to a
    kernel of their own (which may split again). The prologue and its per-element results stay."""
    todo = [grp for grp in st.groups if grp.kind == Kind.ROWS]
    while todo:
        grp = todo.pop()
        if grp.kind != Kind.ROWS or not st.target.splits_rows(*rows_shape(grp)):
            continue
        moved = _after_reductions(grp)
        kept = [op for op in grp.ops if op not in moved]
        if not moved or isinstance(fit(st, kept, Kind.ROWS, grp.domain, grp.n_red), str):
            continue
        rows = any(is_reduction(op) for op in moved)
        kind = Kind.ROWS if rows else Kind.ELEMENTWISE
        got = fit(st, moved, kind, grp.domain if rows else None, grp.n_red if rows else 0)
        grp.ops = kept
        M, R = rows_shape(grp)
        grp.reason = f"split: {M} row(s) of {R} run across blocks; what reads the reduced values is a kernel of its own"
        if isinstance(got, str):  # no common domain: one kernel per op
            for op in moved:
                kind = Kind.ELEMENTWISE if is_free(op) else _classify(op, st.target)
                st.new([op], kind, domain=op.inputs[0].shape if kind == Kind.ROWS else op.out.shape,
                       n_red=trailing_reduced(op) or 0 if kind == Kind.ROWS else 0)
            continue
        new = st.new(moved, kind, domain=got[0], n_red=got[1])
        todo.append(new)


def _signature(grp: Group) -> tuple:
    work = tuple((op.name, str(sorted(op.attrs.items())) if not is_fill(op) else "", op.out.dtype.name)
                 for op in grp.ops if not is_view(op))
    return (grp.kind, grp.n_red > 0, work)


def _feeds_collective(st: State, grp: Group) -> bool:
    return any(s.kind == Kind.COLLECTIVE for s in st.succ(grp))


def _hoists_recomputation(st: State, a: Group, b: Group, recomputes: bool | None = None) -> bool:
    """One of a, b recomputes values (remat) and no kernel reads results of both: merged, the
    recomputation would run where the earlier one runs, its values live from there on. `recomputes`:
    whether one of them does, where the caller knows."""
    if recomputes is None:
        recomputes = any(remat.is_recompute(o) for o in a.ops + b.ops)
    return recomputes and not (st.succ(a) & st.succ(b))


LIBRARY_KINDS = (Kind.MATMUL, Kind.ATTENTION, Kind.CONV, Kind.COLLECTIVE)


def _is_update(st: State, grp: Group) -> bool:
    """grp is an optimizer's update that goes on the side stream (module docstring: updates)."""
    return st.target.side_stream and updates_only(grp.kind, grp.ops, st.exposed(grp.ops), st.g, st.updated, st.users)


def _overwritten_readers(st: State, grp: Group) -> set[Op]:
    """The ops outside grp that read an input grp overwrites (they must run before it)."""
    inside = set(grp.ops)
    return {u for v in st.exposed(grp.ops) if v in st.updated for u in st.users[st.updated[v]] if u not in inside}


def _ready_points(st: State) -> dict[Group, frozenset]:
    """Each update kernel (side stream) -> the library calls upstream of what it reads: updates with
    the same ones become ready together (a Linear's weight and bias, after its weight gradient)."""
    updates = [k for k in st.groups if _is_update(st, k)]
    if not updates:
        return {}
    up: dict[Op, frozenset] = {}
    for op in st.g.ops:  # topological: each op's inputs come first
        calls = [up[v.producer] for v in op.inputs if v.producer in up]
        mine = frozenset().union(*calls)
        grp = st.group_of.get(op)
        up[op] = mine | {grp} if grp is not None and grp.kind in LIBRARY_KINDS else mine
    return {k: frozenset().union(*(up[v.producer] for op in k.ops for v in op.inputs
                                   if v.producer in up and v.producer not in k.ops)) for k in updates}


def _horizontal(st: State) -> None:
    """Independent kernels of the same signature (scalar kernels: any) become one launch. Not those
    feeding a collective: merged with work the backward does later, a gradient bucket's last kernel
    would hold its all-reduce back until then (passes/schedule_collectives.py); nor recomputations
    that different kernels read: each runs right before what reads it; nor, with a side stream,
    updates that become ready after different library calls: the earlier would wait for the later."""
    pairs, buffers = _Pairs(st), Buffers(st)
    # the kernels each kernel may merge with: those of its signature (scalar kernels: every scalar one)
    peers = Peers([k for k in st.groups if k not in pairs.alone],
                  lambda k: k.kind if k.kind == Kind.SCALAR else pairs.sig_of(k))
    for a in list(st.groups):
        if a not in st.groups or a in pairs.alone:
            continue
        sig, key, last, took = pairs.sig_of(a), peers.key(a), st.groups[-1], False
        if _capped(a):
            a.reason = f"size cap: at most {MAX_SEGMENTS} segments per horizontal kernel"
            continue
        for b in peers.of(key):
            if b is a or (a.kind != Kind.SCALAR and pairs.sig_of(b) != sig) or pairs.apart(a, b):
                continue
            if a.kind == Kind.ELEMENTWISE and 8 * buffers.joined(a, b) > st.target.kernel_param_bytes:
                a.reason = f"size cap: the pointers of one kernel fit in {st.target.kernel_param_bytes} bytes"
                continue
            pairs.merge(a, b)
            if a.kind == Kind.ELEMENTWISE:
                buffers.merge(a, b)
            merge(st, a, b, in_order=False)  # (a's ops are sorted once, below; nothing here reads their order)
            peers.drop(b)
            took = True
            if _capped(a) and b is not last:  # (the cap is checked before each further kernel)
                a.reason = f"size cap: at most {MAX_SEGMENTS} segments per horizontal kernel"
                break
        if took:
            a.ops = st.sorted_ops(a.ops)
            peers.moved(a, key)


class _Pairs:
    """What the horizontal rule asks of two kernels, kept through its merges: each kernel's signature
    (dropped when it takes another in), which kernels reach which (Closure; st.reaches where the
    kernels' edges form a cycle), each kernel's phase flags, and the library calls each update
    becomes ready after (_ready_points)."""

    def __init__(self, st: State):
        self.st = st
        self.sigs = {k: _signature(k) for k in st.groups}
        self.ready = _ready_points(st)
        # kernels that stay apart whatever merges (a merge keeps each of these properties off)
        self.alone = {k for k in st.groups if k.kind not in _FUSIBLE or not self.sigs[k][2] or columns_of(k)
                      or _feeds_collective(st, k) or writes_transposed(st, k)}
        self.reach = Closure.of(st)
        self.flags: dict[Group, tuple[bool, bool, bool]] = {}  # kernel -> (recomputes, has forward ops, has later)

    def sig_of(self, k: Group) -> tuple:
        if k not in self.sigs:
            self.sigs[k] = _signature(k)
        return self.sigs[k]

    def flags_of(self, k: Group) -> tuple[bool, bool, bool]:
        if k not in self.flags:
            st = self.st
            self.flags[k] = (any(remat.is_recompute(o) for o in k.ops), any(o in st.forward for o in k.ops),
                             any(o in st.later for o in k.ops))
        return self.flags[k]

    def apart(self, a: Group, b: Group) -> bool:
        """a and b may not be one launch: one reaches the other, or one launch would mix phases, hoist a
        recomputation or backward work, or hold back an update."""
        st, reach = self.st, self.reach
        if reach is None and (st.reaches(a, b) or st.reaches(b, a)):
            return True
        if reach is not None and (reach.reaches(a, b) or reach.reaches(b, a)):
            return True
        (ra, fa, la), (rb, fb, lb) = self.flags_of(a), self.flags_of(b)  # checks needing them only where they may
        return bool((ra or rb) and (mixes_phases(a.ops + b.ops) or _hoists_recomputation(st, a, b, True))
                    or (fa or fb) and (la or lb) and hoists_backward(st, a.ops + b.ops)
                    or self.ready.get(a) != self.ready.get(b))

    def merge(self, a: Group, b: Group) -> None:
        """a takes b in (before a's ops change)."""
        if self.reach is not None:
            self.reach.merge(a, b)  # neither reaches the other: merged, they reach what either did
        self.flags[a] = tuple(x or y for x, y in zip(self.flags_of(a), self.flags_of(b)))
        self.sigs.pop(a, None)


def _capped(a: Group) -> bool:
    """A scalar or rows kernel of a horizontal merge has as many segments as it may have."""
    return a.kind != Kind.ELEMENTWISE and len(a.merged) + 1 >= MAX_SEGMENTS


def _frees_memory(st: State, grp: Group, before: Container[Group]) -> bool:
    """grp is the last reader of more bytes of temporaries than it writes: every other reader of
    those values runs before it (in `before`), and none reads them through a view (which may share
    their buffer). Graph outputs are bound buffers, not the arena's; a kernel writing one that
    replaces an input (an optimizer update, written in place once nothing else reads the input)
    keeps its place."""
    exposed = st.exposed(grp.ops)
    if any(v in st.updated for v in exposed):
        return False
    inside = set(grp.ops)
    written = sum(_bytes(v) for v in exposed if not is_view(v.producer) and v not in st.outs)
    read = {v for op in grp.ops for v in op.inputs if v.producer is not None and v.producer not in inside}
    freed = sum(_bytes(v) for v in read
                if not is_view(v.producer) and not is_free(v.producer) and v not in st.outs
                and all(u in inside or (not is_view(u) and st.group_of.get(u) in before) for u in st.users[v]))
    return freed > written


def _bytes(v: Value) -> int:
    return v.type.numel * v.dtype.itemsize


def _order(st: State) -> list[Group]:
    """Groups in a topological order of the kernel graph: among the ready kernels, an update for the
    side stream (after every reader of what it overwrites) or 0-d work it reads first, then one
    that frees more memory than it takes (a weight gradient, last reader of the saved layer input,
    before the data gradient), then by first op's position."""
    import networkx as nx  # (imported when a graph is first fused: a plan loaded from the plan cache needs it not)

    kernels = nx.DiGraph()
    kernels.add_nodes_from(st.groups)
    kernels.add_edges_from((grp, s) for grp in st.groups for s in st.succ(grp))
    # collectives in program order: every rank must issue them in the same order (ir/ops/collective.py)
    chain = sorted((grp for grp in st.groups if grp.kind == Kind.COLLECTIVE), key=lambda k: st.index[k.ops[0]])
    kernels.add_edges_from(zip(chain, chain[1:]))
    updates = {k for k in st.groups if _is_update(st, k)}
    kernels.add_edges_from((st.group_of[u], k) for k in updates for u in _overwritten_readers(st, k)
                           if st.group_of.get(u, k) is not k)
    try:
        before = _Ancestors(kernels)
    except nx.NetworkXUnfeasible:
        raise AssertionError("internal error: kernel graph has a cycle") from None
    # and the 0-d work they read (an optimizer's step count and bias corrections, traced after the backward)
    early = updates | {k for u in updates for k in before.of(u) if k.kind == Kind.SCALAR}
    first = {k: (k not in early, not _frees_memory(st, k, before.at(k)), st.index[k.ops[0]]) for k in st.groups}
    order = list(nx.lexicographical_topological_sort(kernels, key=first.__getitem__))
    kernels.clear()  # (a networkx graph refers to itself: emptied, it holds no kernel for the cyclic collector)
    return order


class _Ancestors:
    """nx.ancestors of every kernel of a DAG (a networkx DiGraph) at once: a bitset per kernel, made in
    topological order."""

    def __init__(self, kernels):
        import networkx as nx

        order = list(nx.topological_sort(kernels))
        self.nodes, self.bit = order, {k: 1 << i for i, k in enumerate(order)}
        self.bits: dict = {}
        for k in order:
            up = 0
            for p in kernels.predecessors(k):
                up |= self.bit[p] | self.bits[p]
            self.bits[k] = up

    def at(self, k) -> _Members:
        """The kernels before k, as a container."""
        return _Members(self.bits[k], self.bit)

    def of(self, k) -> list:
        """The kernels before k, in topological order."""
        bits = self.bits[k]
        return [n for n in self.nodes if bits & self.bit[n]]


class _Members:
    def __init__(self, bits: int, bit: dict):
        self.bits, self.bit = bits, bit

    def __contains__(self, k) -> bool:
        return bool(self.bits & self.bit.get(k, 0))


_READ_BY = {Kind.MATMUL: "result read by a matmul", Kind.OPAQUE: "result read by an opaque op or column reduction",
            Kind.REDUCTION: "result read by an opaque op or column reduction"}


def _reason(st: State, grp: Group) -> str:
    """Why grp's results go to memory: what it is (a library call, an output), a reason a later stage
    gave (split, size cap), else why the first kernel reading it that has a reason did not take it in."""
    outs = st.exposed(grp.ops)
    readers = {st.group_of[u].kind for v in outs for u in st.users[v]}
    if grp.kind == Kind.MATMUL:
        return "matmul (cuBLASLt call" + (f", epilogue {grp.epilogue})" if grp.epilogue != "none" else ")")
    if grp.kind == Kind.OPAQUE:
        return f"opaque op ({grp.ops[-1].name})"
    if grp.kind == Kind.COLLECTIVE:
        return f"collective ({grp.ops[-1].name}: a communicator call)"
    if grp.kind == Kind.HOST:
        return f"host copy ({grp.ops[-1].name}: an offloaded activation to or from pinned host memory)"
    if grp.kind == Kind.ATTENTION and len(grp.ops) > 1:
        return "attention (one library call writes the result and the softmax statistics)"
    if grp.kind == Kind.REDUCTION and not st.target.bgrad_epilogue and is_bias_grad(st, grp.ops[-1]):
        return ("bias gradient (a column reduction of its own, faster than cuBLASLt's BGRAD epilogue on "
                "large layers; FLAME_MATMUL_BGRAD=1 puts it in the GEMM)")
    if grp.kind == Kind.REDUCTION:
        return "column reduction (its own kernel: reduced dims are not innermost)"
    if any(v in st.outs for v in outs) and not readers:
        return "graph output"
    if grp.reason:
        return grp.reason
    # the boundary with the first kernel reading this one that has a reason: why its op did not join
    # (the last try's answer; a try whose op joined after all, or no longer reads this kernel, is no boundary)
    outside = sorted(((u, op) for op in grp.ops for u in st.users[op.out] if st.group_of[u] is not grp),
                     key=lambda pair: st.index[pair[0]])
    for u, op in outside:
        why = st.refused.get((op, u)) or _READ_BY.get(st.group_of[u].kind)
        if why:
            return why
    if grp.kind == Kind.SCALAR:
        return "scalar results read by several kernels"
    return "results used at another shape or by a later reduction"


def fuse(g: Graph, target: Target = DEFAULT_TARGET) -> Graph:
    """Partition g's ops into kernels (see the module docstring), for a backend that can do what
    `target` says (which matmul epilogues the library fuses, how long a row a kernel caches).

    Before: a verified graph. After: the same function with ops reordered so that each kernel's ops
    are contiguous, and `groups` set: one FusionGroup per kernel or library call, in launch order,
    with the values it writes and the reason for its boundary. g is not modified."""
    g = prepare(stage_reductions(unit_reductions(g), target.splits_rows))  # (clone_constants last)
    st = State(g, target)
    st.keep_order(True)
    for op in g.ops:
        if not is_free(op):
            _place(st, op)
    st.keep_order(False)  # (the rules below change kernels' ops in place)
    for op in g.ops:  # free ops only read by ops that went elsewhere
        if op not in st.group_of:
            st.new([op], Kind.ELEMENTWISE, domain=op.out.shape)
    _recompute_conversions(st)
    _absorb_scalars(st)
    absorb_readers(st)
    _split_few_rows(st)
    absorb_bias_grads(st)  # before the rows kernels take column sums: a carried column costs a row kernel its vectors
    absorb_columns(st)
    absorb_recomputations(st)
    absorb_columns(st)  # a column sum of a recomputation that joined a rows kernel
    hoist_broadcasts(st)  # (a kernel carrying columns is one row segment: its broadcast work goes first)
    column_kernels(st)  # column sums no row kernel took, into an elementwise kernel that reads their input
    _recompute_conversions(st)  # a widening conversion such a kernel shares with its other readers
    absorb_bias_grads(st)
    recompute_tails(st)
    hoist_broadcasts(st)  # what a recomputation left alone
    store_conversions(st)  # (before the horizontal rule: the updates reading those results then look alike)
    pair_transposes(st)
    _horizontal(st)
    ordered = _order(st)
    g.ops = [op for grp in ordered for op in grp.ops]
    g.groups = [
        FusionGroup(tuple(grp.ops), _recorded_kind(grp), _reason(st, grp), tuple(st.exposed(grp.ops)), grp.epilogue)
        for grp in ordered
    ]
    _mark_updates(g, target)
    st.release()
    return g


def _mark_updates(g: Graph, target: Target) -> None:
    """With Target.side_stream, record on each kernel that is an optimizer's update (fusion_state.updates_only,
    as the graph now stands) that the plan issues it on the side stream."""
    if not target.side_stream:
        return
    users, updated = g.users(), g.updated()
    g.groups = [dataclasses.replace(k, update=True) if updates_only(k.kind, k.ops, k.outputs, g, updated, users)
                else k for k in g.groups]
