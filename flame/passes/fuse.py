"""The fusion pass: partition a graph's ops into kernels (FusionGroups) and record why each kernel
boundary exists (DESIGN.md §5). Only fusions whose math is the op-by-op math are made: a fused
kernel evaluates the same ops on the same operands and rounds every intermediate to its dtype.

Rules, in the order they apply:
- conversions (flame.passes.prepare_fusion.CONVERSIONS: cast, neg, abs) first move past views and
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
  launch with one segment each (e.g. the AdamW update of every parameter), at most MAX_SEGMENTS;
- matmul: stays a library call; a bias add over the last dim and a relu or tanh-GELU that only it
  feeds are marked as its epilogue when the target's library runs that epilogue
  (Target.matmul_epilogues; the plan builder still falls back to a kernel when the runtime it builds
  for cannot); a GELU whose pre-activation the backward reads writes it as the call's aux result;
  a column sum over k of an operand (a bias gradient) that no rows kernel carries joins the call
  as its BGRAD epilogue;
- attention: stays a library call; an attention forward and its softmax statistics (the op autodiff
  saves for the backward, same inputs and attributes) are one call that writes both;
- `full` constants and views of graph inputs are cloned into every kernel that reads them
  (prepare_fusion.clone_constants);
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
  dbias over channels-last data: per group and channel in the group; indexmap.column_map);
- few long rows (Target.splits_rows; a whole-tensor reduction is one row): codegen splits each row
  across blocks, so what reads a reduced value leaves the group (its own kernel, reason recorded);
  the prologue and its per-element results (a loss's gradient) stay fused;
Not fused: other column reductions (their own tuned kernel), gather/scatter/pad/concat/argmax (opaque)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

from flame.ir.graph import FusionGroup, Graph, Kind, Op, Value
from flame.ir.indexmap import (
    Layout,
    canonical,
    column_map,
    contiguous_strides,
    derive,
    is_reduction,
    is_view,
    row_segments,
    trailing_reduced,
)
from flame.ir.ops.attention import FORWARD, STATS
from flame.ir.registry import get
from flame.ir.symbolic import SymInt
from flame.passes import remat
from flame.passes.autodiff import is_backward
from flame.passes.prepare_fusion import clone_constants, drop_zero_signs, is_conversion, is_free, move_conversions
from flame.passes.remat import RecomputeLoc
from flame.target import DEFAULT_TARGET, Target

MAX_SEGMENTS = 32  # segments of one horizontal kernel: its source grows with each
PHASES = "recomputed in the backward (remat): kept out of forward kernels"
HOISTED = "backward work of full size kept out of forward kernels (its result would live until the backward)"
_FUSIBLE = (Kind.ELEMENTWISE, Kind.SCALAR, Kind.ROWS)


@dataclass(eq=False)
class _Group:
    ops: list[Op]
    kind: Kind
    reason: str = ""
    domain: tuple[int, ...] | None = None
    n_red: int = 0
    epilogue: str = "none"
    merged: list[_Group] = field(default_factory=list)


class _State:
    """The groups while they form, with the graph's users and outputs for exposure and cycle checks."""

    def __init__(self, g: Graph, target: Target):
        self.g, self.target = g, target
        self.users = g.users()
        self.outs = set(g.outputs)
        self.group_of: dict[Op, _Group] = {}
        self.groups: list[_Group] = []
        self.index = {op: i for i, op in enumerate(g.ops)}
        # (op of a kernel, reader op) -> why the reader could not join that kernel (its last try)
        self.refused: dict[tuple[Op, Op], str] = {}
        self.forward, self.later = _phases(g)
        self.in_place = {g.outputs[o] for o in g.aliases}

    def refuse(self, grp: _Group, op: Op, why: str) -> bool:
        """Record why `op` could not join grp, against each op of grp it reads; False (no join)."""
        for v in op.inputs:
            if self.group_of.get(v.producer) is grp:
                self.refused[v.producer, op] = why
        return False

    def new(self, ops: list[Op], kind: Kind, **kw) -> _Group:
        grp = _Group(list(ops), kind, **kw)
        self.groups.append(grp)
        for op in ops:
            self.group_of[op] = grp
        return grp

    def exposed(self, ops: list[Op]) -> list[Value]:
        inside = set(ops)
        return [op.out for op in ops if op.out in self.outs or any(u not in inside for u in self.users[op.out])]

    def succ(self, grp: _Group) -> set[_Group]:
        return {self.group_of[u] for op in grp.ops for u in self.users[op.out] if u in self.group_of} - {grp}

    def reaches(self, src: _Group, dst: _Group) -> bool:
        """A path of data edges src -> ... -> dst between kernels."""
        todo, seen = list(self.succ(src)), set()
        while todo:
            h = todo.pop()
            if h is dst:
                return True
            if h in seen:
                continue
            seen.add(h)
            todo += [s for s in self.succ(h) if s not in seen]
        return False

    def sorted_ops(self, ops) -> list[Op]:
        return sorted(ops, key=self.index.__getitem__)


def _fit(st: _State, ops: list[Op], kind: Kind, domain=None, n_red: int = 0) -> tuple | str:
    """(domain, n_red) under which `ops` form one kernel, or why they cannot."""
    if _mixes_phases(ops):
        return PHASES
    exposed = st.exposed(ops)
    if _hoists_backward(st, ops, exposed):
        return HOISTED
    if kind == Kind.ROWS:
        got = derive(ops, exposed, domain, n_red)
        got = _copied_view(st, ops, got) or got
        return got if isinstance(got, str) else (domain, n_red)
    big = max(math.prod(op.out.shape) for op in ops)
    shapes = list(dict.fromkeys(op.out.shape for op in reversed(ops) if math.prod(op.out.shape) == big))
    why = "no common iteration domain"
    for shape in shapes:
        got = derive(ops, exposed, shape, 0)
        got = _copied_view(st, ops, got) or got
        if isinstance(got, Layout):
            return shape, 0
        why = got
    return why


def _copied_view(st: _State, ops: list[Op], lay: Layout | str) -> str:
    """Why a layout that stores a result in another order than its shape's (indexmap._onto) is not
    taken: a matmul reads a permuted or reshaped operand as it is (so no value it reads is stored
    so), and a view's result is not copied beside its stored input, nor by a group of views alone
    (the plan has none of these copies)."""
    if isinstance(lay, str):
        return ""
    views = {op.out: op for op in ops if is_view(op)}
    for v, m in lay.stores.items():
        if m == canonical(v, lay.domain, lay.n_red):
            continue
        if _feeds_matmul(st, v) or (v in views and (len(views) == len(ops) or views[v].inputs[0] in lay.stores)):
            return f"a view's result would be copied (result {v.type})"
    return ""


def _feeds_matmul(st: _State, v: Value) -> bool:
    """A matmul reads v, directly or through views (it takes permuted, reshaped operands as they are)."""
    users = st.users.get(v, ())
    return any(get(u.name).library == "matmul" or (is_view(u) and _feeds_matmul(st, u.out)) for u in users)


def _constants(st: _State, op: Op) -> list[Op]:
    return [v.producer for v in op.inputs if is_free(v.producer) and v.producer not in st.group_of]


def _try_join(st: _State, grp: _Group, op: Op) -> bool:
    ins = {st.group_of[v.producer] for v in op.inputs if v.producer in st.group_of} - {grp}
    if any(st.reaches(grp, h) for h in ins):
        return st.refuse(grp, op, "joining would make a cycle: the reader also reads a kernel that reads this one")
    ops = st.sorted_ops(grp.ops + _constants(st, op) + [op])
    domain, n_red = grp.domain, grp.n_red
    if is_reduction(op):
        n_red = trailing_reduced(op)
        if grp.kind == Kind.ROWS and (grp.domain != op.inputs[0].shape or grp.n_red != n_red):
            return st.refuse(grp, op, f"a reduction of {list(op.inputs[0].shape)} over its last {n_red} dim(s) in a "
                                      f"kernel reducing {list(grp.domain)} over its last {grp.n_red}")
        domain = op.inputs[0].shape
        got = _fit(st, ops, Kind.ROWS, domain, n_red)
    else:
        got = _fit(st, ops, grp.kind if grp.kind == Kind.ROWS else Kind.ELEMENTWISE, domain, n_red)
    if isinstance(got, str):
        return st.refuse(grp, op, got)
    for c in _constants(st, op) + [op]:
        st.group_of[c] = grp
    grp.ops = ops
    grp.domain, grp.n_red = got
    if is_reduction(op):
        grp.kind = Kind.ROWS
    return True


def _classify(op: Op) -> Kind:
    opdef = get(op.name)
    if opdef.library:
        return Kind(opdef.library)  # each library call is its own kind
    if is_reduction(op):
        return Kind.ROWS if trailing_reduced(op) is not None else Kind.REDUCTION
    if opdef.category == "elementwise" or opdef.view is not None:
        small = math.prod(op.out.shape) == 1 and all(math.prod(v.shape) == 1 for v in op.inputs)
        return Kind.SCALAR if small else Kind.ELEMENTWISE
    return Kind.OPAQUE


# (epilogue so far, activation) -> the epilogue with the activation; GELU only in its tanh form
_ACTIVATIONS = {("none", "relu"): "relu", ("bias", "relu"): "bias_relu", ("none", "gelu"): "gelu",
                ("bias", "gelu"): "bias_gelu"}
AUX_ALIGN = 8  # cuBLASLt's GELU aux (the pre-activation) has a leading dimension that is a multiple of 8


def _epilogue(st: _State, grp: _Group, op: Op) -> str | None:
    """The epilogue `op` adds to matmul group grp, or None: add of a bias [n] (size-1 dims aside)
    broadcast over the rows, then relu or tanh-GELU. The intermediate has no other user and is not
    returned, except before a GELU: then it is written as the call's second result (the aux)."""
    last = grp.ops[-1].out
    if _mixes_phases([*grp.ops, op]) or last.dtype.name not in ("f32", "f16", "bf16"):
        return None
    private = st.users[last] == [op] and last not in st.outs
    if op.name in ("relu", "gelu"):
        epi = _ACTIVATIONS.get((grp.epilogue, op.name))
        if epi is None or (op.name == "gelu" and op.attrs["approximate"] != "tanh"):
            return None
        if not private:  # the pre-activation is read later (the backward): GELU can write it as aux
            if op.name != "gelu" or last.shape[-1] % AUX_ALIGN:
                return None
            epi += "_aux"
        return epi if epi in st.target.matmul_epilogues else None
    if not private or op.name != "add" or grp.epilogue != "none" or op.out.type != last.type:
        return None
    if "bias" not in st.target.matmul_epilogues:
        return None
    bias = op.inputs[1] if op.inputs[0] is last else op.inputs[0]
    n = last.shape[-1]
    squeezed = [s for s in bias.shape if s != 1]
    ok = bias is not last and bias.shape[-1:] == (n,) and squeezed == [n] and bias.dtype == last.dtype
    return "bias" if ok else None


def bias_grad_operand(mm: Op, red: Op) -> str | None:
    """"a" / "b" when reduction `red` sums matmul mm's operand a [m, k] over k (axis 1) / b [k, n]
    over k (axis 0): what cuBLASLt's BGRAD epilogues compute beside the product (a Linear's bias
    gradient beside its weight gradient). The operand may be the reduced value with its leading
    dims flattened ([b, t, n] summed over (0, 1) is [b*t, n] summed over 0). 2-D GEMMs only (a
    batched call would sum per batch)."""
    if red.name != "reduce_sum" or mm.out.type.rank != 2 or any(v.type.rank != 2 for v in mm.inputs):
        return None
    v, axes = red.inputs[0], list(red.attrs["axes"])
    if mm.inputs[0].shape[1] < 2 or v.dtype != mm.out.dtype or v.dtype.name not in ("f32", "f16", "bf16"):
        return None  # cuBLASLt writes the gradient in the result's type; K = 1 is refused by older ones
    if v.type.rank < 2 or axes != list(range(v.type.rank - 1)):
        return None
    # cuBLASLt sums only an operand stored [k, ...] (runtime/matmul.py bgrad_supported): b as is, or
    # a stored transposed (permute [1, 0], read as ta); the other two layouts are refused at run time
    a, b = mm.inputs
    t = _transposed_from(a)
    if v.shape[-1] == b.shape[1] and _unreshaped(v) is _unreshaped(b):
        return "b"
    if t is not None and v.shape[-1] == t.shape[1] and _unreshaped(v) is _unreshaped(t):
        return "a"
    return None


def _unreshaped(x: Value) -> Value:
    """x before the reshapes that produced it: two values with the same one and the same last dim
    hold the same [m, n] matrix in row-major order."""
    while x.producer is not None and x.producer.name == "reshape":
        x = x.producer.inputs[0]
    return x


def _transposed_from(x: Value) -> Value | None:
    """u when x = permute(u, [1, 0]) (the weight-gradient GEMM dy^T @ x reads dy so), else None."""
    p = x.producer
    return p.inputs[0] if p is not None and p.name == "permute" and list(p.attrs["perm"]) == [1, 0] else None


def _absorb_bias_grads(st: _State) -> None:
    """A column sum over k of a matmul operand (a bias gradient; left over by _absorb_columns) joins
    the matmul's call as its BGRAD epilogue: the GEMM reads the operand anyway."""
    for rg in [grp for grp in st.groups if grp.kind in (Kind.REDUCTION, Kind.ROWS) and len(grp.ops) == 1]:
        (red,) = rg.ops
        v = red.inputs[0]
        root = _unreshaped(v)  # the GEMM reads the same data through reshapes and / or a transpose
        readers, views = list(st.users[root]), list(st.users[root])
        for _ in range(3):
            views = [u for t in views if t.name in ("reshape", "permute") for u in st.users[t.out]]
            readers += views
        for mg in [st.group_of[u] for u in readers if u in st.group_of]:
            if mg.kind != Kind.MATMUL or mg.epilogue != "none" or len(mg.ops) != 1:
                continue
            side = bias_grad_operand(mg.ops[0], red)
            epi = f"bgrad_{side}"
            if side is None or epi not in st.target.matmul_epilogues or _mixes_phases(mg.ops + rg.ops):
                continue
            if st.reaches(rg, mg) or st.reaches(mg, rg):
                continue
            mg.ops.append(red)
            mg.epilogue = epi
            st.group_of[red] = mg
            st.groups.remove(rg)
            break


def _place(st: _State, op: Op) -> None:
    kind = _classify(op)
    producers = [st.group_of[v.producer] for v in op.inputs if v.producer in st.group_of]
    for grp in dict.fromkeys(reversed(producers)):
        if grp.kind == Kind.MATMUL:
            epi = _epilogue(st, grp, op)
            if epi is not None and not any(st.reaches(grp, h) for h in producers if h is not grp):
                grp.ops.append(op)
                st.group_of[op] = grp
                grp.epilogue = epi
                return
        ok_kinds = (Kind.SCALAR, Kind.ROWS) if kind == Kind.SCALAR else (Kind.ELEMENTWISE, Kind.ROWS)
        if kind in (Kind.SCALAR, Kind.ELEMENTWISE, Kind.ROWS) and grp.kind in ok_kinds and _try_join(st, grp, op):
            for other in dict.fromkeys(producers):
                if other is not grp and other in st.groups and other.kind in ok_kinds:
                    _try_merge(st, grp, other)
            return
    if kind in (Kind.SCALAR, Kind.ELEMENTWISE, Kind.ROWS):
        free = _constants(st, op)
        domain, n_red = (op.inputs[0].shape, trailing_reduced(op)) if kind == Kind.ROWS else (op.out.shape, 0)
        got = _fit(st, st.sorted_ops(free + [op]), kind if kind == Kind.ROWS else Kind.ELEMENTWISE, domain, n_red)
        if isinstance(got, str):  # a view that does not map into op's domain: its own kernel
            for f in free:
                st.new([f], Kind.ELEMENTWISE, domain=f.out.shape)
            free = []
        grp = st.new(free + [op], kind, domain=domain)
        grp.n_red = n_red
        return
    for c in _constants(st, op):
        st.new([c], Kind.ELEMENTWISE, domain=c.out.shape)
    if kind == Kind.ATTENTION and _join_attention(st, op):
        return
    st.new([op], kind)


def _same_value(a: Value, b: Value) -> bool:
    """a is b, or both are clones of one free op (`clone_constants` gives each reader its own)."""
    pa, pb = a.producer, b.producer
    return a is b or (is_free(pa) and is_free(pb) and (pa.name, pa.attrs, pa.inputs) == (pb.name, pb.attrs, pb.inputs))


def _join_attention(st: _State, op: Op) -> bool:
    """Join an attention forward and its softmax statistics (the same inputs and attributes, in one
    phase) into one group: one library call writes both (ir/ops/attention.py)."""
    for grp in reversed(st.groups):
        if grp.kind != Kind.ATTENTION or len(grp.ops) != 1 or _mixes_phases([grp.ops[0], op]):
            continue
        other = grp.ops[0]
        fwd, stats = (other, op) if other.name == FORWARD else (op, other)
        if ({fwd.name, stats.name} == {FORWARD, STATS} and fwd.attrs == stats.attrs
                and len(fwd.inputs) == len(stats.inputs) and all(map(_same_value, fwd.inputs, stats.inputs))):
            grp.ops = st.sorted_ops([other, op])
            st.group_of[op] = grp
            return True
    return False


def _mixes_phases(ops) -> bool:
    """A recomputation and a forward op in one kernel (constants and input views, which every
    kernel computes for itself, aside)."""
    return remat.mixes_phases([o for o in ops if not is_free(o)])


def _phases(g: Graph) -> tuple[set[Op], set[Op]]:
    """The forward ops (before the backward; not the optimizer update after it) and the backward ops
    after the backward's first op no kernel fuses (a matmul, a convolution, attention, a gather): those
    run well after the forward (what comes before, a loss's gradient, right after it)."""
    start = remat.split(g)
    heavy = next((i for i in range(start, len(g.ops))
                  if get(g.ops[i].name).category not in ("elementwise", "reduction") and not is_view(g.ops[i])),
                 len(g.ops))
    return set(g.ops[:start]), {op for op in g.ops[heavy:] if is_backward(op)}


def _hoists_backward(st: _State, ops: list[Op], exposed: list[Value]) -> bool:
    """A kernel of forward ops and backward ops that writes a backward result of its full size which
    elementwise backward work of that size reads, well into the backward (the phases rule): the
    kernel would run in the forward and keep that result alive until then, while the kernel of its
    readers computes it for free."""
    work = [o for o in ops if not is_free(o)]
    if not any(o in st.forward for o in work) or not any(o in st.later for o in work):
        return False
    big = max(o.out.type.numel for o in work)
    return any(v.producer in st.later and v.type.numel == big and all(_rides_along(u, big) for u in st.users[v])
               for v in exposed)


def _rides_along(op: Op, n: int) -> bool:
    return get(op.name).category == "elementwise" and not is_view(op) and op.out.type.numel == n


def _merge(st: _State, a: _Group, b: _Group) -> None:
    a.ops = st.sorted_ops(a.ops + b.ops)
    a.merged.append(b)
    for op in b.ops:
        st.group_of[op] = a
    st.groups.remove(b)


def _try_merge(st: _State, dst: _Group, src: _Group) -> None:
    """Merge producer kernel src into dst (which reads it) when no third kernel sits between them."""
    if any(st.reaches(k, dst) for k in st.succ(src) if k is not dst) or st.reaches(dst, src):
        return
    if src.kind == Kind.ROWS and dst.kind == Kind.ROWS and (src.domain, src.n_red) != (dst.domain, dst.n_red):
        return
    kind = Kind.ROWS if Kind.ROWS in (src.kind, dst.kind) else Kind.ELEMENTWISE
    rows = dst if dst.kind == Kind.ROWS else src
    got = _fit(st, st.sorted_ops(src.ops + dst.ops), kind, rows.domain, rows.n_red)
    if not isinstance(got, str):
        _merge(st, dst, src)
        dst.kind = kind if dst.kind != Kind.SCALAR else dst.kind
        dst.domain, dst.n_red = got


def _recorded_kind(grp: _Group) -> Kind:
    """The kind codegen lowers a group by: a scalar kernel is an elementwise one, unless it absorbed a
    reduction (a whole-tensor sum feeding 0-d work), which makes it a rows kernel of one row."""
    if grp.kind == Kind.SCALAR:
        return Kind.ROWS if grp.n_red else Kind.ELEMENTWISE
    return grp.kind


def _absorb_scalars(st: _State) -> None:
    """A scalar kernel whose results only one other fusible kernel reads joins that kernel."""
    for s in [grp for grp in st.groups if grp.kind == Kind.SCALAR]:
        users = st.succ(s)
        if len(users) != 1 or any(v in st.outs for v in st.exposed(s.ops)):
            continue
        (dst,) = users
        if dst.kind not in (Kind.ELEMENTWISE, Kind.ROWS):
            continue
        ops = st.sorted_ops(s.ops + dst.ops)
        got = _fit(st, ops, dst.kind, dst.domain, dst.n_red)
        if not isinstance(got, str):
            _merge(st, dst, s)
            dst.domain, dst.n_red = got


def _recompute_conversions(st: _State) -> None:
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
            if all(_recompute_in(st, u, h, undo) for h in outside) and _settle(st, grp, u, undo):
                continue
            for step in reversed(undo):
                step()


def _recompute_in(st: _State, u: Op, grp: _Group, undo: list) -> bool:
    """Give grp its own copy of conversion u for the ops of grp that read u (undo: how to take it back)."""
    readers = [r for r in st.users[u.out] if st.group_of.get(r) is grp]
    backward_only = all(is_backward(o) for o in grp.ops if not is_free(o))
    loc = RecomputeLoc(u.loc or "") if backward_only and not is_backward(u) else u.loc
    c = Op(u.name, u.inputs, u.attrs, u.out.type, loc)
    saved = (list(grp.ops), grp.domain, grp.n_red, {r: r.inputs for r in readers}, list(st.users[u.inputs[0]]))
    for r in readers:
        r.inputs = tuple(c.out if v is u.out else v for v in r.inputs)
    st.users[u.out] = [r for r in st.users[u.out] if r not in readers]
    st.users[c.out], st.index[c], st.group_of[c] = readers, st.index[u], grp
    st.users[u.inputs[0]].append(c)

    def take_back():
        grp.ops, grp.domain, grp.n_red = saved[0], saved[1], saved[2]
        for r, ins in saved[3].items():
            r.inputs = ins
        st.users[u.out] += readers
        st.users[u.inputs[0]] = saved[4]
        del st.group_of[c]

    undo.append(take_back)
    ops = st.sorted_ops(grp.ops + [c])
    got = _fit(st, ops, grp.kind if grp.kind == Kind.ROWS else Kind.ELEMENTWISE, grp.domain, grp.n_red)
    if isinstance(got, str):
        return False
    grp.ops, (grp.domain, grp.n_red) = ops, got
    return True


def _settle(st: _State, grp: _Group, u: Op, undo: list) -> bool:
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
            got = _fit(st, k.ops, k.kind if k.kind == Kind.ROWS else Kind.ELEMENTWISE, k.domain, k.n_red)
            if isinstance(got, str):
                return False
            k.domain, k.n_red = got
    return True


def _rows_shape(grp: _Group) -> tuple[int, int]:
    """(rows, row length) of a rows group's reductions."""
    n_kept = len(grp.domain) - grp.n_red
    return math.prod(grp.domain[:n_kept]), math.prod(grp.domain[n_kept:])


def _after_reductions(grp: _Group) -> list[Op]:
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


def _read_only_by(grp: _Group, op: Op, readers: set[Op]) -> bool:
    return any(op.out in r.inputs for r in readers) and not any(
        op.out in o.inputs for o in grp.ops if o not in readers)


def _split_few_rows(st: _State) -> None:
    """A rows group with few long rows (Target.splits_rows) runs split across blocks, which needs
    every op of it to be computable chunk by chunk: the ops reading a reduced value (an epilogue
    such as softmax's normalisation, or a second reduction such as layer_norm's variance) move to a
    kernel of their own (which may split again). The prologue and its per-element results stay."""
    todo = [grp for grp in st.groups if grp.kind == Kind.ROWS]
    while todo:
        grp = todo.pop()
        if grp.kind != Kind.ROWS or not st.target.splits_rows(*_rows_shape(grp)):
            continue
        moved = _after_reductions(grp)
        kept = [op for op in grp.ops if op not in moved]
        if not moved or isinstance(_fit(st, kept, Kind.ROWS, grp.domain, grp.n_red), str):
            continue
        rows = any(is_reduction(op) for op in moved)
        kind = Kind.ROWS if rows else Kind.ELEMENTWISE
        got = _fit(st, moved, kind, grp.domain if rows else None, grp.n_red if rows else 0)
        grp.ops = kept
        M, R = _rows_shape(grp)
        grp.reason = f"split: {M} row(s) of {R} run across blocks; what reads the reduced values is a kernel of its own"
        if isinstance(got, str):  # no common domain: one kernel per op
            for op in moved:
                kind = Kind.ELEMENTWISE if is_free(op) else _classify(op)
                st.new([op], kind, domain=op.inputs[0].shape if kind == Kind.ROWS else op.out.shape,
                       n_red=trailing_reduced(op) or 0 if kind == Kind.ROWS else 0)
            continue
        new = st.new(moved, kind, domain=got[0], n_red=got[1])
        todo.append(new)


def _columns(grp: _Group) -> list[Op]:
    """The column reductions a rows group carries (they are not part of its row layout)."""
    return [op for op in grp.ops if is_reduction(op) and trailing_reduced(op) is None]


def _absorb_columns(st: _State) -> None:
    """A column reduction (reduce_sum/mean over dims other than a row's trailing ones) of a value that
    a rows kernel computes or reads over its whole domain joins that kernel: each thread accumulates
    the elements it owns over the rows it visits, and a short second kernel folds the per-thread
    partials (the layer_norm backward's dweight and dbias ride along with dx instead of re-reading
    [rows, cols]). One whose result also depends on kept dims or sums elements of a row (a GroupNorm
    backward's per-channel sums over channels-last data: indexmap.column_map) joins only with
    another such: alone it would trade its launch for the fold's and keep the rows kernel out of a
    horizontal one."""
    waiting: dict[_Group, list[_Group]] = {}
    for cg in [grp for grp in st.groups if grp.kind == Kind.REDUCTION]:
        (op,) = cg.ops
        v = op.inputs[0]
        if op.name not in ("reduce_sum", "reduce_mean") or not v.dtype.is_float or not math.prod(v.shape):
            continue
        for rg in st.groups:
            if rg.kind != Kind.ROWS or math.prod(rg.domain[-rg.n_red:]) > st.target.row_cache:
                continue
            if st.target.splits_rows(*_rows_shape(rg)):
                continue  # a split row kernel carries no column partials
            carried = _columns(rg)
            if len(row_segments([o for o in rg.ops if o not in carried])) != 1:
                continue  # a horizontal rows kernel (e.g. one that took in recomputations) carries none
            touches = v.producer in rg.ops or any(v in o.inputs for o in rg.ops if o not in carried)
            fits = touches and _column_fits(st, rg, op)
            if not fits or st.reaches(cg, rg) or _mixes_phases(rg.ops + cg.ops):
                continue
            if fits == "leading":
                _merge(st, rg, cg)
            else:
                waiting.setdefault(rg, []).append(cg)
            break
    for rg, cgs in waiting.items():
        if len(cgs) > 1 or _columns(rg):
            for cg in cgs:
                if not st.reaches(cg, rg):
                    _merge(st, rg, cg)


def _column_fits(st: _State, rg: _Group, op: Op) -> str:
    """How rows kernel rg can accumulate column reduction op ("" when it cannot): its row layout holds
    op's input once per domain element and each result dim is a domain dim (indexmap.column_map);
    "leading" when the result is the row (a layer_norm's: the reduced dims are the leading ones),
    else "general", which needs a static domain (codegen picks the grid from the kept dims)."""
    ops = [o for o in rg.ops if o not in _columns(rg)]
    v = op.inputs[0]
    lay = derive(ops, list(dict.fromkeys([*st.exposed(ops), v])), rg.domain, rg.n_red)
    if isinstance(lay, str) or v not in lay.stores:
        return ""
    cm = column_map(op, lay.stores[v], rg.domain, rg.n_red)
    if cm is None:
        return ""
    n_kept = len(rg.domain) - rg.n_red
    _, strides = cm.flat(op.out.shape)
    row = contiguous_strides(rg.domain[n_kept:])
    if not cm.depends_on(range(n_kept)) and all(strides[n_kept + i] == s for i, s in enumerate(row)
                                                if rg.domain[n_kept + i] != 1):
        return "leading"
    return "" if any(isinstance(d, SymInt) for d in rg.domain) else "general"


def _absorb_recomputations(st: _State) -> None:
    """siblings: a backward kernel holding recomputed ops (remat) joins another backward kernel that
    reads a value it reads too over the same domain: the recomputation then costs no launch."""
    for a in [grp for grp in st.groups if grp.kind == Kind.ELEMENTWISE]:
        if a not in st.groups or not any(remat.is_recompute(o) for o in a.ops):
            continue
        inside, n = set(a.ops), math.prod(a.domain)
        shared = {v for o in a.ops for v in o.inputs
                  if v.producer not in inside and not is_free(v.producer) and math.prod(v.shape) == n}
        for b in st.groups:
            reads = any(v in shared for o in b.ops for v in o.inputs)
            if (b is a or b.kind not in (Kind.ELEMENTWISE, Kind.ROWS) or not reads or _mixes_phases(a.ops + b.ops)
                    or st.reaches(a, b) or st.reaches(b, a)):
                continue
            carried = _columns(b)  # a kernel with column partials stays one segment (they are not in its layout)
            ops = [o for o in st.sorted_ops(a.ops + b.ops) if o not in carried]
            if carried and len(row_segments(ops)) != 1:
                continue
            got = _fit(st, ops, b.kind, b.domain, b.n_red)
            if not isinstance(got, str):
                _merge(st, b, a)
                b.domain, b.n_red = got
                break


def _signature(grp: _Group) -> tuple:
    work = tuple((op.name, str(sorted(op.attrs.items())) if op.name != "full" else "", op.out.dtype.name)
                 for op in grp.ops if not is_view(op))
    return (grp.kind, grp.n_red > 0, work)


def _feeds_collective(st: _State, grp: _Group) -> bool:
    return any(s.kind == Kind.COLLECTIVE for s in st.succ(grp))


def _hoists_recomputation(st: _State, a: _Group, b: _Group) -> bool:
    """One of a, b recomputes values (remat) and no kernel reads results of both: merged, the
    recomputation would run where the earlier one runs, its values live from there on."""
    recomputes = any(remat.is_recompute(o) for o in a.ops + b.ops)
    return recomputes and not (st.succ(a) & st.succ(b))


def _horizontal(st: _State) -> None:
    """Independent kernels of the same signature (scalar kernels: any) become one launch. Not those
    feeding a collective: merged with work the backward does later, a gradient bucket's last kernel
    would hold its all-reduce back until then (passes/schedule_collectives.py); nor recomputations
    that different kernels read: each runs right before what reads it."""
    for a in list(st.groups):
        if (a not in st.groups or a.kind not in _FUSIBLE or not _signature(a)[2] or _columns(a)
                or _feeds_collective(st, a)):
            continue
        sig = _signature(a)
        for b in list(st.groups):
            if len(a.merged) + 1 >= MAX_SEGMENTS:
                a.reason = f"size cap: at most {MAX_SEGMENTS} segments per horizontal kernel"
                break
            if (b is a or b.kind != a.kind or (a.kind != Kind.SCALAR and _signature(b) != sig) or not _signature(b)[2]
                    or _columns(b) or _feeds_collective(st, b)):
                continue
            both = a.ops + b.ops
            if (st.reaches(a, b) or st.reaches(b, a) or _mixes_phases(both)
                    or _hoists_backward(st, both, st.exposed(both)) or _hoists_recomputation(st, a, b)):
                continue
            _merge(st, a, b)


def _frees_memory(st: _State, grp: _Group, before: set[_Group]) -> bool:
    """grp is the last reader of more bytes of temporaries than it writes: every other reader of
    those values runs before it (in `before`), and none reads them through a view (which may share
    their buffer). Graph outputs are bound buffers, not the arena's; a kernel writing one that
    replaces an input (an optimizer update, written in place once nothing else reads the input)
    keeps its place."""
    exposed = st.exposed(grp.ops)
    if any(v in st.in_place for v in exposed):
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


def _order(st: _State) -> list[_Group]:
    """Groups in a topological order of the kernel graph: among the ready kernels, one that frees
    more memory than it takes first (a weight gradient, last reader of the saved layer input, before
    the data gradient), then by first op's position."""
    kernels = nx.DiGraph()
    kernels.add_nodes_from(st.groups)
    kernels.add_edges_from((grp, s) for grp in st.groups for s in st.succ(grp))
    # collectives in program order: every rank must issue them in the same order (ir/ops/collective.py)
    chain = sorted((grp for grp in st.groups if grp.kind == Kind.COLLECTIVE), key=lambda k: st.index[k.ops[0]])
    kernels.add_edges_from(zip(chain, chain[1:]))
    first = {k: (not _frees_memory(st, k, nx.ancestors(kernels, k)), st.index[k.ops[0]]) for k in st.groups}
    try:
        return list(nx.lexicographical_topological_sort(kernels, key=first.__getitem__))
    except nx.NetworkXUnfeasible:
        raise AssertionError("internal error: kernel graph has a cycle") from None


_READ_BY = {Kind.MATMUL: "result read by a matmul", Kind.OPAQUE: "result read by an opaque op or column reduction",
            Kind.REDUCTION: "result read by an opaque op or column reduction"}


def _reason(st: _State, grp: _Group) -> str:
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
    if grp.kind == Kind.ATTENTION and len(grp.ops) > 1:
        return "attention (one library call writes the result and the softmax statistics)"
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
    g = clone_constants(move_conversions(drop_zero_signs(g)))
    st = _State(g, target)
    for op in g.ops:
        if not is_free(op):
            _place(st, op)
    for op in g.ops:  # free ops only read by ops that went elsewhere
        if op not in st.group_of:
            st.new([op], Kind.ELEMENTWISE, domain=op.out.shape)
    _recompute_conversions(st)
    _absorb_scalars(st)
    _split_few_rows(st)
    _absorb_columns(st)
    _absorb_recomputations(st)
    _absorb_columns(st)  # a column sum of a recomputation that joined a rows kernel
    _absorb_bias_grads(st)
    _horizontal(st)
    ordered = _order(st)
    g.ops = [op for grp in ordered for op in grp.ops]
    g.groups = [
        FusionGroup(tuple(grp.ops), _recorded_kind(grp), _reason(st, grp), tuple(st.exposed(grp.ops)), grp.epilogue)
        for grp in ordered
    ]
    return g
