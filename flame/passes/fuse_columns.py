"""Where the fusion pass (passes/fuse.py) puts column sums and recomputations after partitioning: a
column reduction rides in the rows kernel that computes or reads its input (per-thread partials and a
fold); a bias gradient is a column-reduction kernel of its own, or with Target.bgrad_epilogue its
weight-gradient GEMM's BGRAD epilogue; and a kernel of recomputed ops joins a backward kernel that
reads what it reads (siblings)."""

from __future__ import annotations

import math

from flame.ir.graph import Kind, Op, Value
from flame.ir.indexmap import (
    column_map,
    contiguous_strides,
    is_reduction,
    leading_reduced,
    trailing_reduced,
)
from flame.ir.ops.reduce import REDUCE_SUM
from flame.ir.registry import accumulates, axis_order, get, is_relabel
from flame.ir.symbolic import SymInt
from flame.passes import remat
from flame.passes.fusion_state import (
    Closure,
    Group,
    State,
    carried_columns,
    fit,
    merge,
    mixes_phases,
    one_row_segment,
    rows_shape,
)
from flame.passes.prepare_fusion import is_free

# the most result elements of a column reduction a rows kernel carries in general form (a result that
# depends on the kept dims): its fold gives each result element a block of its own, so past one grid's
# worth of blocks a reduction kernel of its own, reading the input once, costs less (gpt_train's
# position-embedding gradient, [8, 1024, 768] summed over the batch into 786432 results, made the last
# LayerNorm backward 465 us at 5% of copy on an H100 instead of ~60 us)
GENERAL_MAX_RESULTS = 1 << 16


def bias_grad_operand(mm: Op, red: Op) -> str | None:
    """"a" / "b" when reduction `red` sums matmul mm's operand a [m, k] over k (axis 1) / b [k, n]
    over k (axis 0): what cuBLASLt's BGRAD epilogues compute beside the product (a Linear's bias
    gradient beside its weight gradient). The operand may be the reduced value with its leading
    dims flattened ([b, t, n] summed over (0, 1) is [b*t, n] summed over 0). 2-D GEMMs only (a
    batched call would sum per batch)."""
    if red.name != REDUCE_SUM.name or mm.out.type.rank != 2 or any(v.type.rank != 2 for v in mm.inputs):
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
    """x before the reshapes (relabelling views) that produced it: two values with the same one and the
    same last dim hold the same [m, n] matrix in row-major order."""
    while x.producer is not None and is_relabel(x.producer):
        x = x.producer.inputs[0]
    return x


def _transposed_from(x: Value) -> Value | None:
    """u when x = permute(u, [1, 0]) (the weight-gradient GEMM dy^T @ x reads dy so), else None."""
    p = x.producer
    return p.inputs[0] if axis_order(p) == (1, 0) else None


def _view_readers(st: State, root: Value) -> list[Op]:
    """The ops reading root directly or through up to three reshapes / transposes."""
    readers, views = list(st.users[root]), list(st.users[root])
    for _ in range(3):
        views = [u for t in views if is_relabel(t) or axis_order(t) is not None for u in st.users[t.out]]
        readers += views
    return readers


def absorb_bias_grads(st: State) -> None:
    """With Target.bgrad_epilogue, a column sum over k of a matmul operand (a bias gradient) joins the
    matmul's call as its BGRAD epilogue: the GEMM reads the operand anyway. Runs before absorb_columns
    (and after, for sums that recomputations left)."""
    if not st.target.bgrad_epilogue:
        return
    for rg in [grp for grp in st.groups if grp.kind in (Kind.REDUCTION, Kind.ROWS) and len(grp.ops) == 1]:
        (red,) = rg.ops
        v = red.inputs[0]
        readers = _view_readers(st, _unreshaped(v))  # the GEMM reads the same data through views
        for mg in [st.group_of[u] for u in readers if u in st.group_of]:
            if mg.kind != Kind.MATMUL or mg.epilogue != "none" or len(mg.ops) != 1:
                continue
            side = bias_grad_operand(mg.ops[0], red)
            epi = f"bgrad_{side}"
            if side is None or epi not in st.target.matmul_epilogues or mixes_phases(mg.ops + rg.ops):
                continue
            if st.reaches(rg, mg) or st.reaches(mg, rg):
                continue
            mg.ops.append(red)
            mg.epilogue = epi
            st.group_of[red] = mg
            st.groups.remove(rg)
            break


def columns_of(grp: Group) -> list[Op]:
    """The column reductions a rows group carries (they are not part of its row layout)."""
    return carried_columns(grp.ops)


def absorb_columns(st: State) -> None:
    """A column reduction (reduce_sum/mean over dims other than a row's trailing ones) of a value that
    a rows kernel computes or reads over its whole domain joins that kernel: each thread accumulates
    the elements it owns over the rows it visits, and a short second kernel folds the per-thread
    partials (the layer_norm backward's dweight and dbias ride along with dx instead of re-reading
    [rows, cols]). One whose result also depends on kept dims or sums elements of a row (a GroupNorm
    backward's per-channel sums over channels-last data: indexmap.column_map) joins only with
    another such: alone it would trade its launch for the fold's and keep the rows kernel out of a
    horizontal one. A bias gradient (is_bias_grad) stays a column-reduction kernel of its own: carried
    by the kernel computing it, the GELU backward of mlp_bf16_train takes 109.5 us + an 8 us fold
    against 75 + 18.6 + 2.2, and its cross-entropy row kernel 90.6 + 3.2 against 46 + 21 (H200:
    benchmarks/results/2026-11-29-H200-bias-grad/)."""
    waiting: dict[Group, list[Group]] = {}
    one_segment: dict[Group, bool] = {}  # per rows kernel: the columns it takes in are not in its layout
    touching = _rows_touching(st)  # value -> the rows kernels computing or reading it (kept through merges)
    pos = {k: i for i, k in enumerate(st.groups)}
    for cg in [grp for grp in st.groups if grp.kind == Kind.REDUCTION]:
        (op,) = cg.ops
        v = op.inputs[0]
        if not accumulates(op) or not v.dtype.is_float or not math.prod(v.shape):
            continue
        if is_bias_grad(st, op):
            continue  # a column kernel of its own (docstring), or its GEMM's epilogue
        for rg in sorted(touching.get(v, ()), key=pos.__getitem__):  # those computing or reading v, in order
            if math.prod(rg.domain[-rg.n_red:]) > st.target.row_cache:
                continue
            if st.target.splits_rows(*rows_shape(rg)):
                continue  # a split row kernel carries no column partials
            carried = columns_of(rg)
            if rg not in one_segment:
                one_segment[rg] = one_row_segment(rg.ops)
            if not one_segment[rg]:
                continue  # a horizontal rows kernel (e.g. one that took in recomputations) carries none
            touches = v.producer in rg.ops or any(v in o.inputs for o in rg.ops if o not in carried)
            fits = touches and _column_fits(st, rg, op)
            if not fits or st.reaches(cg, rg) or mixes_phases(rg.ops + cg.ops):
                continue
            if fits == "leading":
                merge(st, rg, cg)
                _touches(touching, rg, op)
            else:
                waiting.setdefault(rg, []).append(cg)
            break
    for rg, cgs in waiting.items():
        if len(cgs) > 1 or columns_of(rg):
            for cg in cgs:
                if not st.reaches(cg, rg):
                    merge(st, rg, cg)


def _rows_touching(st: State) -> dict[Value, set[Group]]:
    """Each value -> the rows kernels that compute or read it."""
    touching: dict[Value, set[Group]] = {}
    for rg in st.groups:
        if rg.kind == Kind.ROWS:
            for o in rg.ops:
                _touches(touching, rg, o)
    return touching


def _touches(touching: dict[Value, set[Group]], rg: Group, o: Op) -> None:
    """Rows kernel rg holds op o: it computes o's result and reads its inputs."""
    for x in (o.out, *o.inputs):
        touching.setdefault(x, set()).add(rg)


def column_kernels(st: State) -> None:
    """Column reductions that sum whole columns (indexmap.leading_reduced: the kept dims innermost, a
    channels-last BatchNorm's per-channel sums) of a value an elementwise kernel computes or reads
    over its whole domain join that kernel, which becomes a rows kernel of those columns' rows with no
    row reduction, carrying them: a BatchNorm's sum(x) and sum(x*x), or its backward's sum(dy) and
    sum(dy*x), then cost one read of x (of dy and x) instead of a pass each over values written for
    them (f32 ones, for a bf16 BatchNorm). The conversions are placed again after it (fuse.py), so that a
    widening conversion the carrying kernel computes is recomputed by its other readers rather than written.
    A column sum that a kernel with row reductions computes or reads the input of is left to it
    (absorb_columns: a LayerNorm backward's dweight and dbias ride in its row kernel)."""
    row_kernels = [grp for grp in st.groups if grp.kind == Kind.ROWS
                   and any(is_reduction(o) and trailing_reduced(o) is not None for o in grp.ops)]
    by_rows = {v for grp in row_kernels for o in grp.ops for v in (o.out, *o.inputs)}
    # reduction kernel -> its leading_reduced dims, for those that may join a kernel (in kernel order)
    summed = {cg: n for cg in st.groups if cg.kind == Kind.REDUCTION
              for n in [_column_candidate(st, cg.ops[0], by_rows)] if n is not None}
    if not summed:
        return
    taken: set[Group] = set()  # the reduction kernels merged into one (gone from st.groups)
    closure = Closure.of(st)
    reaches = st.reaches if closure is None else closure.reaches
    for eg in [grp for grp in st.groups if grp.kind == Kind.ELEMENTWISE]:
        reads, mine = {v for o in eg.ops for v in o.inputs}, set(eg.ops)
        for cg in [grp for grp in summed if grp not in taken]:
            (op,) = cg.ops
            v, n_red = op.inputs[0], summed[cg]
            if not (v.producer in mine or v in reads):
                continue  # (asked first: the cheapest question, and the answer for most pairs)
            if v.type.numel != math.prod(eg.domain):
                continue  # dynamic sizes and bias gradients keep their column kernel (absorb_columns)
            if eg.kind == Kind.ROWS and (eg.domain, eg.n_red) != (v.shape, n_red):
                continue  # carries columns of another row layout already
            if mixes_phases(eg.ops + cg.ops):
                continue
            if reaches(cg, eg) or any(reaches(k, cg) for k in st.succ(eg) if k is not cg):
                continue
            carried = columns_of(eg)
            trial = Group([o for o in eg.ops if o not in carried], Kind.ROWS, domain=v.shape, n_red=n_red)
            if _column_fits(st, trial, op) != "leading" or isinstance(fit(st, eg.ops + cg.ops, Kind.ROWS,
                                                                            v.shape, n_red), str):
                continue
            if not one_row_segment(trial.ops):
                continue  # codegen carries columns in a one-segment row kernel only
            if closure is not None:
                closure.merge(eg, cg)
            merge(st, eg, cg)
            taken.add(cg)
            mine.update(cg.ops)
            eg.kind, eg.domain, eg.n_red = Kind.ROWS, v.shape, n_red


def _column_candidate(st: State, op: Op, by_rows: set[Value]) -> int | None:
    """The dims column reduction op sums (indexmap.leading_reduced) when column_kernels may give it to
    an elementwise kernel, whichever: a float sum over whole columns of a static, non-empty value that
    is no bias gradient and that no kernel with row reductions computes or reads. None otherwise.
    What it asks does not change while column_kernels merges (those merges make rows kernels only)."""
    v, n_red = op.inputs[0], leading_reduced(op)
    if (not accumulates(op) or not v.dtype.is_float or n_red is None
            or any(isinstance(d, SymInt) for d in v.shape) or not math.prod(v.shape)
            or is_bias_grad(st, op) or v in by_rows):
        return None
    return n_red


def is_bias_grad(st: State, red: Op) -> bool:
    """red is a bias gradient: a column sum that a GEMM reading the same operand could compute as its
    BGRAD epilogue (absorb_bias_grads), whether or not the target has it take it."""
    readers = _view_readers(st, _unreshaped(red.inputs[0]))
    return any(st.group_of.get(u) is not None and st.group_of[u].kind == Kind.MATMUL
               and bias_grad_operand(u, red) is not None for u in readers)


def _column_fits(st: State, rg: Group, op: Op) -> str:
    """How rows kernel rg can accumulate column reduction op ("" when it cannot): its row layout holds
    op's input once per domain element and each result dim is a domain dim (indexmap.column_map);
    "leading" when the result is the row (a layer_norm's: the reduced dims are the leading ones),
    else "general", which needs a static domain (codegen picks the grid from the kept dims) and at most
    GENERAL_MAX_RESULTS result elements."""
    carried = columns_of(rg)
    ops = [o for o in rg.ops if o not in carried]
    v = op.inputs[0]
    lay = st.layouts.derive(ops, list(dict.fromkeys([*st.exposed(ops), v])), rg.domain, rg.n_red)
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
    if any(isinstance(d, SymInt) for d in rg.domain) or op.out.type.numel > GENERAL_MAX_RESULTS:
        return ""
    return "general"


def store_conversions(st: State) -> None:
    """A conversion that is the only reader of a column reduction a rows kernel carries (a bf16
    LayerNorm's dweight and dbias: f32 sums rounded to the parameter's dtype) joins that kernel: its
    fold stores the converted result, rounded once as the reader would have. The kernel that read it
    (an optimizer's update) then reads a gradient of the parameter's dtype like every other one, so
    the horizontal rule gives all parameters one update launch. Runs once column sums are placed."""
    for rg in [grp for grp in st.groups if grp.kind == Kind.ROWS]:
        for c in [o for o in columns_of(rg) if is_reduction(o)]:
            readers = st.users[c.out]
            if c.out in st.outs or len(readers) != 1 or not _storable(readers[0]):
                continue
            (u,) = readers
            eg = st.group_of.get(u)
            if eg is None or eg is rg or eg.kind not in (Kind.ELEMENTWISE, Kind.ROWS) or mixes_phases(rg.ops + [u]):
                continue
            rest = [o for o in eg.ops if o is not u]
            got = fit(st, rest, eg.kind, eg.domain if eg.kind == Kind.ROWS else None, eg.n_red) if rest else ()
            mine = st.sorted_ops(rg.ops + [u])
            if isinstance(got, str) or isinstance(fit(st, mine, Kind.ROWS, rg.domain, rg.n_red), str):
                continue
            if rest:
                eg.ops, (eg.domain, eg.n_red) = rest, got
            else:  # the conversion was a kernel of its own (a gradient the step returns)
                st.groups.remove(eg)
            rg.ops = mine
            st.group_of[u] = rg


def _storable(op: Op) -> bool:
    """op is a conversion from one float dtype to a narrower one of f32, f16, bf16 (a fold kernel stores
    it from its f32 total)."""
    a, b = op.inputs[0].dtype, op.out.dtype
    return (get(op.name).conversion and a.name in ("f32", "f16", "bf16") and b.name in ("f32", "f16", "bf16")
            and b.itemsize < a.itemsize)


def absorb_recomputations(st: State) -> None:
    """siblings: a backward kernel holding recomputed ops (remat) joins another backward kernel that
    reads a value it reads too over the same domain: the recomputation then costs no launch."""
    readers: dict[Value, list[Op]] = {}  # value -> the ops of kernels reading it (merges move ops, never change them)
    for k in st.groups:
        for o in k.ops:
            for v in o.inputs:
                readers.setdefault(v, []).append(o)
    closure = Closure.of(st)  # (kept through the merges below: of two kernels neither of which reaches the other)
    reaches = st.reaches if closure is None else closure.reaches
    for a in [grp for grp in st.groups if grp.kind == Kind.ELEMENTWISE]:
        if a not in st.groups or not any(remat.is_recompute(o) for o in a.ops):
            continue
        inside, n = set(a.ops), math.prod(a.domain)
        shared = {v for o in a.ops for v in o.inputs
                  if v.producer not in inside and not is_free(v.producer) and math.prod(v.shape) == n}
        reading = {st.group_of[o] for v in shared for o in readers.get(v, ())}  # the kernels reading one
        for b in st.groups.among(reading):
            if (b is a or b.kind not in (Kind.ELEMENTWISE, Kind.ROWS) or mixes_phases(a.ops + b.ops)
                    or reaches(a, b) or reaches(b, a)):
                continue
            carried = columns_of(b)  # a kernel with column partials stays one segment (they are not in its layout)
            ops = [o for o in st.sorted_ops(a.ops + b.ops) if o not in carried]
            if carried and not one_row_segment(ops):
                continue
            got = fit(st, ops, b.kind, b.domain, b.n_red)
            if not isinstance(got, str):
                if closure is not None:
                    closure.merge(b, a)
                merge(st, b, a)
                b.domain, b.n_red = got
                break
