"""Fused kernels: what every fused group shares (its inputs, segments, layouts and the Emitter of
values at index maps) and the elementwise kernel (templates/fused_elementwise.cu.j2); the row kernel
is fused_rows.py. codegen.lower picks between them by the group's Kind.

ABI (the op ABI of codegen.lower, widened): `NAME(const T* in0, ..., T* out0, ..., T* outK)`: the group's external
inputs in order of first use (`group_inputs`), then one pointer per value in group.outputs. Every
value is evaluated at coordinates of an iteration domain through the IndexMaps of flame.ir.indexmap;
each intermediate is rounded to its own dtype (f16/bf16 compute in f32 as single-op kernels do), so
the kernel computes what the ops compute one by one. Independent parts of a group (horizontal fusion)
become segments of the one kernel: of static sizes, in one flat space of 16-byte vectors that every
block takes an equal contiguous share of (Config.balanced_steps steps of Config.balanced_unroll of
them per thread),
segments that differ only in their pointers sharing one body (_lower_balanced,
templates/fused_balanced.cu.j2); 0-d work and dynamic sizes side by side, each segment on its own
range of blocks (segment_blocks). On the vector path, a concat's or pad's piece whose edges fall on
whole vectors is tested once per vector and its inputs are loaded as vectors (vector_pieces.py).

Row kernels: one warp per row (R <= 256, several rows per block) or a 128/512-thread block per row;
rows of at most Target.row_cache elements keep each input element in registers across the reductions
(max, then sum, then normalize), longer rows re-read global memory in each pass (multi-pass)."""

from __future__ import annotations

import dataclasses
import math
import re

from flame.codegen import cuda_c, views
from flame.codegen.elementwise import op_expr
from flame.codegen.kernel import (
    Config,
    Kernel,
    balanced_scalars,
    block_for,
    finish,
    group_dtypes,
    group_header,
    group_params,
    group_prelude,
    index_types,
    kernel_fields,
    render_template,
    splat_loads,
    store,
)
from flame.codegen.vector_pieces import VectorPieces
from flame.ir import indexmap, symbolic
from flame.ir.graph import FusionGroup, Op, Value, segments
from flame.ir.indexmap import (
    IndexMap,
    Layout,
    Layouts,
    contiguous_strides,
    domains,
    input_map,
    is_reduction,
    is_view,
    leading_reduced,
    pieces,
    row_segments,
    trailing_reduced,
)
from flame.ir.printer import op_key
from flame.ir.registry import get, is_fill
from flame.target import DEFAULT_TARGET, Target


def positional(op: Op) -> bool:
    """op's snippet reads `i`, its own flat index (the OpDef's positional trait)."""
    return get(op.name).positional


def own_indexed(op: Op) -> bool:
    """op's code reads its own flat index: a positional op's snippet, a piecewise op's tests."""
    return get(op.name).positional or get(op.name).pieces is not None


def group_inputs(group: FusionGroup) -> list[Value]:
    """The values a group reads but does not compute, in order of first use (the kernel's inputs)."""
    return _reads(group.ops)


def _reads(ops: list[Op] | tuple[Op, ...]) -> list[Value]:
    inside = {op.out for op in ops}
    out: dict[Value, None] = {}
    for op in ops:
        for v in op.inputs:
            if v not in inside:
                out.setdefault(v)
    return list(out)


def _written(segs: list[list[Op]], outputs: list[Value]) -> list[list[Value]]:
    """Per segment, the outputs its ops compute, in the outputs' order."""
    at: dict[Op, list[int]] = {}
    for i, seg in enumerate(segs):
        for op in seg:
            at.setdefault(op, []).append(i)
    written: list[list[Value]] = [[] for _ in segs]
    for v in outputs:
        for i in dict.fromkeys(at.get(v.producer, ())):
            written[i].append(v)
    return written


def layout(ops: list[Op], exposed: list[Value], columns: tuple[Op, ...] = (), layouts: Layouts | None = None) -> Layout:
    """The iteration domain and maps of one segment (as the fusion pass chose them): a row
    reduction's, else that of the column reductions it carries (rows of their kept innermost dims:
    indexmap.leading_reduced), else an elementwise one. `layouts`: derive's answers kept for the
    segments alike of one kernel."""
    derive = indexmap.derive if layouts is None else layouts.derive
    red = [op for op in ops if is_reduction(op)]
    if red or columns:
        op = red[0] if red else columns[0]
        got = derive(ops, exposed, op.inputs[0].shape, trailing_reduced(op) if red else leading_reduced(op))
        if isinstance(got, Layout):
            return got
        raise NotImplementedError(f"rows group cannot be lowered: {got}")
    why = ""
    for shape in domains(ops):
        got = derive(ops, exposed, shape, 0)
        if isinstance(got, Layout):
            return got
        why = got
    raise NotImplementedError(f"elementwise group cannot be lowered: {why}")


class Emitter:
    """Statements computing values at index maps. `load(v, m)` spells a read of an external value;
    row-class values (maps that ignore the reduced dims) go to `row`, the others to `elem`."""

    def __init__(self, lay: Layout, values: set[Value], load, own_index, prefix: str = "t",
                 vector: VectorPieces | None = None):
        self.lay, self.lay_values, self.load, self.own_index = lay, values, load, own_index
        self.vector = vector  # the vector path's pieces tested once per vector, where they can be
        self.red = range(len(lay.domain) - lay.n_red, len(lay.domain))
        self.row: list[str] = []
        self.elem: list[str] = []
        self.memo_row: dict = {}
        self.memo_elem: dict = {}
        self.count, self.prefix = 0, prefix
        self.kept: dict[str, tuple[str, object]] = {}  # a narrow value's name -> (its stored form, its dtype)

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def _memo(self, m: IndexMap) -> tuple[dict, list[str]]:
        return (self.memo_row, self.row) if not m.depends_on(self.red) else (self.memo_elem, self.elem)

    def _needs(self, v: Value, m: IndexMap) -> list[tuple[Value, IndexMap]]:
        """What computing v at m reads first, in the order value() computes it (views and computed ops;
        loads, piecewise ops and reductions read nothing here)."""
        op = v.producer
        if op is None or op.out not in self.lay_values or is_reduction(op) or pieces(op) is not None:
            return []
        if is_view(op):
            return [(op.inputs[0], self.lay.input_at(op, 0, m))]
        return [(u, m.then(input_map(op, k))) for k, u in enumerate(op.inputs)]

    def value(self, v: Value, m: IndexMap) -> str:
        """The name of v's value at m, computing what it needs first: from the deepest value up, so that
        a chain of thousands of ops needs no deep recursion; the statements come in the order a
        depth-first walk of the inputs gives."""
        stack, seen = [((v, m), iter(self._needs(v, m)))], {(v, m)}
        while stack:
            key, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                self._value(*key)  # what it reads is computed by now
            elif nxt not in seen and nxt not in self._memo(nxt[1])[0]:
                seen.add(nxt)
                stack.append((nxt, iter(self._needs(*nxt))))
        return self._memo(m)[0][(v, m)]

    def stored(self, v: Value, m: IndexMap) -> str:
        """v's value at m as v's storage type, for a store: for a value of a narrower type than it
        computes in (f16, bf16, FP8), the form its own rounding made, where the op computing it kept one
        (cuda_c.bind_rounded)."""
        name = self.value(v, m)
        kept = self.kept.get(name)
        return kept[0] if kept is not None and kept[1] == v.dtype else store(v, name)

    def _value(self, v: Value, m: IndexMap) -> str:
        memo, lines = self._memo(m)
        if (v, m) in memo:
            return memo[(v, m)]
        op = v.producer
        if op is None or op.out not in self.lay_values:
            expr = self.load(v, m)
            name = self.fresh()
            lines.append(f"const {cuda_c.compute_dtype(v.dtype).cuda_type} {name} = {expr};")
        elif is_view(op):
            name = self._value(op.inputs[0], self.lay.input_at(op, 0, m))
        elif is_reduction(op):
            raise KeyError(f"internal error: reduction {op.name} used before it is computed")
        elif pieces(op) is not None:
            name = self._select(op, m, lines)
        else:
            name = self._compute(op, m, lines)
        memo[(v, m)] = name
        return name

    def _select(self, op: Op, m: IndexMap, lines: list[str]) -> str:
        """A piecewise op (concat, pad) at m: if / else over its pieces, each computing its input at the
        piece's map inside its own braces (what it reads may lie outside the input elsewhere); a
        piece whose test does not depend on the domain is chosen here."""
        chosen = []
        for p in pieces(op):
            tested = [(b, t) for b, t in ((b, self._bound(op, m, b)) for b in p.bounds) if t is not True]
            if all(t is not False for _, t in tested):
                chosen.append(([t for _, t in tested], [b for b, _ in tested], p))
            if not tested:
                break
        flags = None if self.vector is None else self.vector.flags(
            op, m, [bounds for _, bounds, _ in chosen[:-1]], lambda b, at: self._bound(op, m, b, at))
        ctype = cuda_c.compute_dtype(op.out.dtype).cuda_type
        name = self.fresh()
        lines.append(f"{ctype} {name};")
        for k, (tests, _, p) in enumerate(chosen):
            head = "" if k == 0 else "} else "
            last = k == len(chosen) - 1
            lines.append(head + ("{" if last else f"if ({flags[k] if flags else ' && '.join(tests)}) {{"))
            if self.vector is not None:
                self.vector.enter(flags, k, last)
            try:
                body, val = self._branch(lambda p=p: self.value(op.inputs[p.source], m.then(p.index_map))
                                         if p.source is not None else cuda_c.literal(op.attrs["value"], op.out.dtype))
            finally:
                if self.vector is not None:
                    self.vector.leave()
            lines += ["  " + line for line in body] + [f"  {name} = {val};"]
        lines.append("}")
        return name

    def _bound(self, op: Op, m: IndexMap, bound: tuple[int, int, int], at: str | None = None) -> str | bool:
        """The test lo <= c[axis] < hi of op's result coordinate at m, or its value where it is fixed;
        `at`: the result's flat index to test (else its own index at m)."""
        axis, lo, hi = bound
        if not any(c for c, n in zip(m.rows[axis], self.lay.domain) if n != 1):
            return lo <= m.base[axis] < hi
        size, stride = op.out.shape[axis], contiguous_strides(op.out.shape)[axis]
        at = f"(off_t)({self.own_index(op.out, m) if at is None else at})"
        at = f"{at} / {stride}" if stride != 1 else at
        c = f"({at} % {size})" if axis else f"({at})"
        # a bound that is a function of the size is always tested: dropping it at a size where it is 0 or
        # the extent would make the source differ from one size to the next (a guard, NVRTC at that size)
        upper = symbolic.nonzero(size - hi) if isinstance(size - hi, symbolic.SymInt) else hi < size
        tests = ([f"{c} >= {lo}"] if symbolic.nonzero(lo) else []) + ([f"{c} < {hi}"] if upper else [])
        return " && ".join(tests) or True

    def _branch(self, compute) -> tuple[list[str], str]:
        """(statements, value) of compute() emitted apart: the values it computes stay in its braces."""
        saved = self.row, self.elem, self.memo_row, self.memo_elem
        self.row = self.elem = []
        self.memo_row, self.memo_elem = dict(self.memo_row), dict(self.memo_elem)
        try:
            val = compute()
            return self.row, val
        finally:
            self.row, self.elem, self.memo_row, self.memo_elem = saved

    def _compute(self, op: Op, m: IndexMap, lines: list[str]) -> str:
        args = [self._value(u, m.then(input_map(op, k))) for k, u in enumerate(op.inputs)]
        expr, expr_dtype = op_expr(op, args)
        name = self.fresh()
        if positional(op):  # the snippet reads `i`: the op's own flat index at this point
            # bind the position first: `const idx_t i = (idx_t)(i)` would read the new, uninitialised i
            ctype = cuda_c.compute_dtype(op.out.dtype).cuda_type
            rounded = cuda_c.load(cuda_c.convert(expr, expr_dtype, op.out.dtype), op.out.dtype)
            lines.append(f"{ctype} {name}; {{ const idx_t {name}_i = (idx_t)({self.own_index(op.out, m)}); "
                         f"const idx_t i = {name}_i; {name} = {rounded}; }}")
        else:
            decls, kept = cuda_c.bind_rounded(name, expr, expr_dtype, op.out.dtype)
            lines += decls
            if kept is not None:
                self.kept[name] = (kept, op.out.dtype)
        return name


def _computed(ops) -> list[str]:
    """The names of the ops that compute (views and fills left out), each once, in their order."""
    return list(dict.fromkeys(op.name for op in ops if not is_view(op) and not is_fill(op)))


def _stem(group: FusionGroup, outputs: list[Value]) -> str:
    """A fused kernel's name: its first four computed op names (or copy) and its first output's dtype."""
    return "fused_" + "_".join(_computed(group.ops)[:4] or ["copy"]) + f"_{outputs[0].dtype.name}"


def prepare(group: FusionGroup) -> tuple[list[Value], list[list[Op]], list[Layout], tuple[Op, ...]] | None:
    """(inputs, segments, their layouts, carried column reductions) of a fused group; None when it
    writes nothing."""
    outputs = list(group.outputs)
    if not outputs or all(math.prod(v.shape) == 0 for v in outputs):
        return None
    inputs = group_inputs(group)
    # column reductions a rows group carries (passes/fuse.py): computed from the row layout's values; the
    # conversions of their results it holds are stored by the fold kernel (rows_columns.Columns)
    columns = tuple(op for op in group.ops if is_reduction(op) and trailing_reduced(op) is None)
    results = {op.out for op in columns}
    kept = [op for op in group.ops if op not in columns and not (op.inputs and op.inputs[0] in results)]
    col_in = [op.inputs[0] for op in columns]

    def laid(segs: list[list[Op]]) -> list[Layout]:
        layouts = Layouts()  # a horizontal kernel's segments alike (an update per parameter) derive once
        return [
            layout(seg, list(dict.fromkeys(written + col_in)), columns, layouts)
            for seg, written in zip(segs, _written(segs, outputs))
        ]

    segs = row_segments(kept)
    try:
        lays = laid(segs)
    except NotImplementedError:
        if columns:
            raise
        segs = segments(kept)  # an elementwise part the row domain cannot index runs as its own segment
        lays = laid(segs)
    if columns and (len(segs) != 1 or not lays[0].n_red):
        raise NotImplementedError("column reductions ride only in a one-segment row kernel")
    return inputs, segs, lays, columns


def _coords(dims: tuple[int, ...], src: str, c: str) -> list[str]:
    """Row-major coordinates c0.. of flat index `src` in `dims` (off_t)."""
    if not dims:
        return []
    lines = [f"idx_t {c}r = {src};"]
    for d in range(len(dims) - 1, 0, -1):
        lines.append(f"const off_t {c}{d} = (off_t)({c}r % {dims[d]}u); {c}r /= {dims[d]}u;")
    lines.append(f"const off_t {c}0 = (off_t){c}r;")
    return lines


_COORD = re.compile(r"\bc\d+\b")  # a coordinate c0.. read in a statement


def _element_coords(dims: tuple[int, ...], vec: int) -> list[str]:
    """Coordinates c0.. of element i = v * vec + j on the vector path: where the innermost dim holds
    whole vectors, those of the vector's first element (the same for all j: computed once per vector
    once the j loop is unrolled) with j added innermost; else those of i."""
    if not dims or dims[-1] % vec:
        return _coords(dims, "i", "c")
    lines = _coords(dims, f"v * {vec}u", "c")
    last = len(dims) - 1
    head = f"const off_t c{last} = "
    return [line.replace(head, head + "(off_t)j + ", 1) if line.startswith(head) else line for line in lines]


class _MapSegment:
    """The CUDA pieces of one elementwise segment over its collapsed domain."""

    def __init__(self, ops: list[Op], lay: Layout, inputs: list[Value], outputs: list[Value], prefix: str = "",
                 hoist: str | None = None, streaming: bool = False, ordered: bool = False, splat: bool = False):
        # ordered: the loads in the inputs' order (else the layout's), so that a balanced kernel's
        # segments that compute alike from alike-ordered inputs load alike and share one class body;
        # splat: inputs constant along the innermost dim are loaded once per vector (Config.splat_loads)
        self.ops, self.lay, self.prefix = ops, lay, prefix  # prefix: of the pointer names; hoist: of the scalars'
        self.splat = splat
        self.streaming = streaming  # the vector path's loads and stores with the streaming cache hint
        self.hoist = prefix if hoist is None else hoist
        self.in_idx = {v: i for i, v in enumerate(inputs)}
        self.stores = [(outputs.index(v), v, m) for v, m in lay.stores.items()]
        inside = {op.out for op in ops}
        self.loads = [(v, m) for v, ms in lay.maps.items() if v not in inside for m in ms]
        if ordered:
            self.loads.sort(key=lambda k: self.in_idx[k[0]])
        # loads inside a piece of a piecewise op: element by element where the piece holds, never ahead
        self.guarded = {k for k in self.loads if k in lay.guarded}
        indexed = [(op.out, m) for op in ops if own_indexed(op) for m in lay.maps.get(op.out, [])]
        # a piecewise op's tests read its coordinates, which the vector path has element by element too
        self.tested = {(op.out, m) for op in ops if pieces(op) is not None for m in lay.maps.get(op.out, [])}
        keys = self.loads + [(v, m) for _, v, m in self.stores] + indexed
        flat = [views.View(*m.flat(v.shape)) for v, m in keys]
        self.dims, cviews = views.collapse(lay.domain, flat)
        self.view = {k: cv for k, cv in zip(keys, cviews)}
        self.mode = {k: views.mode(cv, self.dims) for k, cv in self.view.items()}
        # stores off the identity (a per-channel result): the vector path writes them element by element
        self.element_stores = {(v, m) for _, v, m in self.stores if self.mode[(v, m)] == "general"}
        self.n = math.prod(lay.domain)
        self.values = inside
        self.vectored: set[tuple[Value, IndexMap]] = set()  # guarded inputs the vector path loads whole

    def vec(self) -> int:
        """Elements per vector on the vector path (1: none). Indexed ops must walk the domain contiguously
        (identity) or be scalars; loads and stores may also be 'blocked' views (see _blocked): a store so
        (a per-channel result of a BatchNorm's normalisation kernel, [1, 1, 1, C] of [N, H, W, C]) is
        written element by element from the vector loop, under its broadcast guard, so it does not
        hold the whole kernel to 2-byte loads (43% of copy in resnet_block_train on an H100)."""
        if any(md == "general" for k, md in self.mode.items()
               if k not in self.loads and k not in self.element_stores and k not in self.tested):
            return 1  # an indexed op off the identity
        sizes = [k[0].dtype.itemsize for k, md in self.mode.items()
                 if md != "scalar" and k not in self.element_stores and not self._splat(k, 1)]
        vec = 16 // max(sizes) if sizes else 1
        if vec == 1 or self.n < vec:
            return 1
        ok = all(self._blocked(k, vec) or self._splat(k, vec) for k, md in self.mode.items()
                 if md == "general" and k not in self.guarded and k not in self.tested)
        return vec if ok else 1

    def _splat(self, key, vec: int) -> bool:
        """An input (Config.splat_loads) constant along the innermost dim, whose vectors of `vec` elements
        stay in one row of it: one element read per vector (a per-row statistic of a norm's
        recomputation, [rows, 1] of [rows, d])."""
        if not self.splat or key not in self.loads or key in self.guarded or key in self.tested:
            return False
        cv = self.view[key]
        return self.mode[key] == "general" and bool(self.dims) and cv.strides[-1] == 0 and self.dims[-1] % vec == 0

    def _blocked(self, key, vec: int) -> bool:
        """A view whose `vec` elements of each aligned vector of the domain are `vec` consecutive,
        vector-aligned elements of its operand (e.g. a bias broadcast along leading dims)."""
        cv = self.view[key]
        return (bool(self.dims) and cv.strides[-1] == 1 and self.dims[-1] % vec == 0 and cv.base % vec == 0
                and all(s % vec == 0 for s in cv.strides[:-1]))

    def _load(self, vector: bool, hoisted: dict[str, tuple[str, str]], pieces: VectorPieces | None = None):
        def load(v: Value, m: IndexMap) -> str:
            k, cv, md = self.in_idx[v], self.view[(v, m)], self.mode[(v, m)]
            if (v, m) in self.guarded:  # where its piece holds only: a whole vector, else element by element
                whole = None if pieces is None else pieces.load(v, m, k)
                if whole is not None:
                    return cuda_c.load(whole, v.dtype)
                return cuda_c.load(f"{self._in(k)}[{'i' if md == 'identity' else views.offset_expr(cv)}]", v.dtype)
            if md == "scalar":  # loaded once per thread, before the loops (both paths share it)
                expr = cuda_c.load(f"{self._in(k)}[{cv.base}]", v.dtype)
                if expr not in hoisted:
                    hoisted[expr] = (f"{self.hoist}s{len(hoisted)}", cuda_c.compute_dtype(v.dtype).cuda_type)
                return hoisted[expr][0]
            if vector:
                raw = f"vl{k}_{self.loads.index((v, m))}[u]" + ("" if self._splat((v, m), self.vec()) else ".v[j]")
            elif md == "identity":
                raw = f"{self._in(k)}[i]"
            else:
                raw = f"{self._in(k)}[{views.offset_expr(cv)}]"
            return cuda_c.load(raw, v.dtype)

        return load

    def walked(self) -> list[int]:
        """The inputs (indices) read at more than one element: pointers the element loop uses."""
        return sorted({self.in_idx[v] for v, m in self.loads
                       if self.mode[(v, m)] != "scalar" or (v, m) in self.guarded})

    def _in(self, k: int) -> str:
        return f"{self.prefix}in{k}"

    def _out(self, o: int) -> str:
        return f"{self.prefix}out{o}"

    def _own_index(self, v: Value, m: IndexMap) -> str:
        cv, md = self.view[(v, m)], self.mode[(v, m)]
        return "i" if md == "identity" else str(cv.base) if md == "scalar" else views.offset_expr(cv)

    def body(self, vector: bool, hoisted: dict[str, tuple[str, str]]) -> tuple[list[str], ...]:
        """(statements per element j; on the vector path also: the U-slot load arrays, the loads of
        vector `v` into slot `u`, the store vectors, and their stores to vector `v` after the j loop).
        The vector path tests pieces once per vector and loads their inputs whole where they allow it
        (vector_pieces); where no input is loaded so, it is the element-by-element form."""
        if vector and self.guarded:
            kept = dict(hoisted)
            pieces = VectorPieces(self.vec(), self.dims, self.view, lambda v: self._in(self.in_idx[v]),
                                  lambda k: self._blocked(k, self.vec()), lambda k: self.mode[k] == "identity",
                                  self.streaming)
            got = self._body(vector, hoisted, pieces)
            self.vectored = pieces.vectored
            if self.vectored:
                return got
            hoisted.clear()
            hoisted.update(kept)
        return self._body(vector, hoisted, None)

    def _body(self, vector: bool, hoisted: dict[str, tuple[str, str]], pieces: VectorPieces | None):
        em = Emitter(self.lay, self.values, self._load(vector, hoisted, pieces), self._own_index, vector=pieces)
        decls, loads, sdecls, post = [], [], [], []  # (no reduced dims: every value goes to em.row)
        if not vector and any(md == "general" for md in self.mode.values()):
            em.row += _coords(self.dims, "i", "c")
        for o, v, m in self.stores:
            em.row.append(self._write(o, v, m, em.stored(v, m), vector, sdecls, post))
        if vector and any(self.mode[k] == "general" for k in self.guarded | self.tested) and (
                pieces is None or any(_COORD.search(line) for line in em.row)):  # (not all read per vector)
            em.row[:0] = _element_coords(self.dims, self.vec())  # for the loads inside pieces (and guarded stores)
        elif vector and self.element_stores:
            em.row[:0] = _coords(self.dims, "i", "c")  # element i's coordinates, for the guarded stores
        if vector:
            vec = self.vec()
            if any(self.mode[k] == "general" for k in self.loads if k not in self.guarded):
                loads += _coords(self.dims, f"v * {vec}u", "c")
            for k, (v, m) in enumerate(self.loads):
                md, t, i = self.mode[(v, m)], f"flame_vec<{v.dtype.cuda_type}, {vec}>", self.in_idx[v]
                if md == "scalar" or (v, m) in self.guarded:
                    continue
                p = self._in(i)
                at = f"({p})[v]" if md == "identity" else f"({p} + {views.offset_expr(self.view[(v, m)])})[0]"
                if self._splat((v, m), vec):  # the vector's first element, the one value it holds
                    decls.append(f"{v.dtype.cuda_type} vl{i}_{k}[U];")
                    loads.append(f"vl{i}_{k}[u] = {at};")
                    continue
                decls.append(f"{t} vl{i}_{k}[U];")
                load = f"reinterpret_cast<const {t}*>{at}"
                loads.append(f"vl{i}_{k}[u] = " + (f"flame_ldcs(&{load});" if self.streaming else f"{load};"))
            if pieces is not None and pieces.lines:  # after the other loads: the pieces' flags and vectors
                if not any(line.startswith("idx_t cr = ") for line in loads):
                    loads[:0] = _coords(self.dims, f"v * {vec}u", "c")
                decls += pieces.decls
                loads += pieces.lines
        return em.row, decls, loads, sdecls, post

    def _write(self, o: int, v: Value, m: IndexMap, val: str, vector: bool, sdecls, post) -> str:
        """The store of v at m, `val` its storage-typed value (Emitter.stored)."""
        cv, md = self.view[(v, m)], self.mode[(v, m)]
        if md == "scalar":
            return f"if (i == 0) {self._out(o)}[{cv.base}] = {val};"
        if md == "identity" and vector:
            t = f"flame_vec<{v.dtype.cuda_type}, {self.vec()}>"
            sdecls.append(f"{t} vs{o};")
            to = f"reinterpret_cast<{t}*>({self._out(o)})[v]"
            post.append(f"flame_stcs(&{to}, vs{o});" if self.streaming else f"{to} = vs{o};")
            return f"vs{o}.v[j] = {val};"
        if md == "identity":
            return f"{self._out(o)}[i] = {val};"
        guard = " && ".join(f"c{d} == 0" for d, s in enumerate(cv.strides) if s == 0)
        write = f"{self._out(o)}[{views.offset_expr(cv)}] = {val};"
        return f"if ({guard}) {write}" if guard else write

    def aligned(self, inputs: list[Value], outputs: list[Value]) -> str:
        vec, conds = self.vec(), []
        for (v, m), md in self.mode.items():
            if md == "scalar" or (v, m) in self.element_stores or self._splat((v, m), vec) or (
                    (v, m) in self.guarded and (v, m) not in self.vectored) or (
                    (v, m) not in self.loads and v not in outputs):
                continue
            ptr = self._in(self.in_idx[v]) if (v, m) in self.loads else self._out(outputs.index(v))
            conds.append(f"(reinterpret_cast<unsigned long long>({ptr}) % {vec * v.dtype.itemsize} == 0)")
        return " && ".join(dict.fromkeys(conds)) or "true"

    def template_fields(self, inputs: list[Value], outputs: list[Value]) -> dict:
        hoisted: dict[str, tuple[str, str]] = {}
        body = self.body(False, hoisted)[0]
        what = " ".join(_computed(self.ops)) or "copy"
        fields = dict(n=self.n, vec=self.vec(), body=body, what=f"{what} over {list(self.lay.domain)}")
        if self.vec() > 1:
            vec_body, decls, loads, sdecls, post = self.body(True, hoisted)
            fields.update(vec_body=vec_body, vec_decls=decls, vec_loads=loads, vec_sdecls=sdecls, vec_stores=post,
                          aligned=self.aligned(inputs, outputs))
        fields["hoisted"] = [f"const {ctype} {name} = {expr};" for expr, (name, ctype) in hoisted.items()]
        fields["hoisted_vars"] = [(ctype, name, expr) for expr, (name, ctype) in hoisted.items()]
        return fields


def segment_blocks(wanted: list[int], cap: int) -> list[int]:
    """Blocks of each segment of an elementwise kernel, from the blocks each wants for one pass over its
    elements: all of them while the kernel's grid stays within `cap`, else a share of `cap` in
    proportion (at least one block each; a segment's blocks loop over its elements grid-stride).
    A horizontal kernel runs its segments side by side, each on its own range of blocks (the block ->
    segment table is a chain of compares on blockIdx.x), so the small tensors of a multi-tensor
    update overlap with the large ones instead of waiting for the whole grid to sweep each in turn."""
    wanted = [max(1, w) for w in wanted]
    if len(wanted) == 1:
        return [min(wanted[0], cap)]
    total = sum(wanted)
    return wanted if total <= cap else [max(1, w * cap // total) for w in wanted]


def lower_map(group: FusionGroup, config: Config, target: Target = DEFAULT_TARGET) -> list[Kernel]:
    """The one elementwise kernel of a fused group (Kind.ELEMENTWISE); [] when it writes nothing.
    At least config.balanced segments of static sizes share one balanced flat schedule
    (_lower_balanced); fewer, scalar (0-d) work and dynamic sizes run their segments side by side."""
    got = prepare(group)
    if got is None:
        return []
    inputs, segs, lays, _ = got
    if any(lay.n_red for lay in lays):
        raise NotImplementedError("an elementwise group with a reduction")
    outputs = list(group.outputs)
    static = not any(isinstance(d, symbolic.SymInt) for v in inputs + outputs for d in v.shape)
    balanced = config.balanced and len(segs) >= max(2, config.balanced)
    if balanced and static and (any(math.prod(lay.domain) > 1 for lay in lays) or balanced_scalars(config)):
        return [_lower_balanced(group, inputs, outputs, segs, lays, config, target)]
    parts = [_MapSegment(seg, lay, inputs, outputs, splat=splat_loads(config)) for seg, lay in zip(segs, lays)]
    fields = [p.template_fields(inputs, outputs) for p in parts]
    block = block_for(max(-(-p.n // p.vec()) for p in parts))
    units = [p.vec() * block * (config.unroll if p.vec() > 1 else 1) for p in parts]
    if len(parts) > 1 and any(isinstance(p.n, symbolic.SymInt) for p in parts) and symbolic.current() is not None:
        # a dynamic size: each segment's blocks as an expression of it (an equal share of the cap)
        blocks = [symbolic.SizeExpr.blocks(p.n, u, max(1, config.grid_cap // len(parts))) for p, u in zip(parts, units)]
    else:
        blocks = segment_blocks([-(-p.n // u) for p, u in zip(parts, units)], config.grid_cap)
    start = 0
    for f, b in zip(fields, blocks):
        f.update(start=start, end=start + b)
        start += b
    idx_t, off_t = index_types(*(math.prod(v.shape) for v in inputs + outputs), *(p.n for p in parts))
    what = "; ".join(f["what"] for f in fields)
    source = render_template(
        "fused_elementwise.cu.j2",
        header=group_header(group, inputs, f"{len(parts)} segment(s): {what}"),
        **kernel_fields(group_dtypes(group), group_params(inputs, outputs)),
        prelude=group_prelude(group),
        block=block,
        U=config.unroll,
        idx_t=idx_t,
        off_t=off_t,
        segments=fields,
    )
    stem = _stem(group, outputs)
    if len(parts) > 1:
        stem += f"_x{len(parts)}"
    k = finish(stem, source, start, block, len(inputs), n_outputs=len(outputs))
    same = len(parts) == 1 and all(v.shape == lays[0].domain for v in outputs)
    return [k if same else dataclasses.replace(k, in_place_safe=False)]


def balanced_chunks(items: list[int], block: int, max_blocks: int, per: int = 0) -> tuple[list[int], int, int]:
    """(offsets, grid, per): segment k holds items [offsets[k], offsets[k + 1]) of one flat space and
    block b the contiguous items [b * per, min((b + 1) * per, total)): every block the same share of
    the whole update, whatever the segments' sizes. per > 0: that share (as many blocks as it takes,
    in waves); else at most max_blocks blocks (one wave)."""
    offsets = [0]
    for it in items:
        offsets.append(offsets[-1] + it)
    total = offsets[-1]
    if per <= 0:
        grid = max(1, min(max_blocks, -(-total // block)))
        per = max(1, -(-total // grid))
    return offsets, max(1, -(-total // per)), per


def _lower_balanced(group: FusionGroup, inputs: list[Value], outputs: list[Value], segs: list[list[Op]],
                    lays: list[Layout], config: Config, target: Target) -> Kernel:
    """A horizontal kernel over one flat space of items (a 16-byte vector of a segment, or one element
    where the segment cannot vectorise): equal contiguous chunks per block, so small tensors add no
    blocks of their own. A chunk is config.balanced_steps steps of U * block items (many waves of
    short blocks, which the hardware schedules as SMs free up), or with balanced_steps 0 an equal
    share of a one-wave grid of Target.sm_count * config.balanced_threads threads. Segments whose
    code is the same up to their pointers (an optimizer's update of each parameter) share ONE body (a
    class): each block first writes the pointers, size and scalars of the segments its chunk touches
    into a shared-memory table (from a switch over the kernel's parameters), then runs the class body
    per item with its segment's row of the table, so the source stays small however many tensors the
    update covers. A thread takes config.balanced_unroll
    items per step, block-strided (g, g + block, ...): where all are full aligned vectors of one
    segment it issues all their loads before computing the first (more bytes in flight per thread),
    else one item at a time. Per element the arithmetic is the segment's own."""
    classes: dict[str, int] = {}
    fields: list[dict] = []
    items, whats, slots, cls_of, wiring = [], [], [], [], []
    probes: dict[tuple, dict] = {}  # a segment's ops as IR text, wired to its inputs and outputs -> its fields
    in_at, out_at = _first_at(inputs), _first_at(outputs)  # (list.index of each)
    for seg, lay in zip(segs, lays):
        outs = (  # in the outputs' order
            [v for v in outputs if v in lay.stores]
            if len(out_at) < len(outputs)
            else sorted((v for v in lay.stores if v in out_at), key=out_at.__getitem__)
        )
        seg = _dataflow_order(seg, outs)
        ins = _reads(seg)  # in the segment's order of first use: the same in segments of one class
        probe, text = _probe(probes, seg, lay, ins, outs, config.balanced_streaming)
        key = (tuple([v.dtype.name for v in ins]), tuple([v.dtype.name for v in outs]), text)
        if key not in classes:
            classes[key] = len(classes)
            fields.append(_class_fields(seg, lay, ins, outs, probe, len(fields)))
        c = classes[key]
        slots.append(fields[c]["count"])
        cls_of.append(c)
        fields[c]["count"] += 1
        n = math.prod(lay.domain)
        wiring.append([(f"in{j}", f"in{in_at[v]}") for j, v in enumerate(ins)]
                      + [(f"out{j}", f"out{out_at[v]}") for j, v in enumerate(outs)])
        items.append(-(-n // fields[c]["vec"]))
        whats.append(probe["what"])
    cases = _table_cases(fields, cls_of, slots, wiring, [math.prod(lay.domain) for lay in lays])
    block = block_for(sum(items))
    U = max(1, config.balanced_unroll)
    offsets, grid, per = balanced_chunks(items, block, target.sm_count * max(1, config.balanced_threads // block),
                                         U * block * max(0, config.balanced_steps))
    idx_t, off_t = index_types(*(math.prod(v.shape) for v in inputs + outputs), offsets[-1] + per)
    source = render_template(
        "fused_balanced.cu.j2",
        header=group_header(group, inputs, f"{len(segs)} segment(s), {len(fields)} class(es), balanced: "
                            + "; ".join(whats)),
        **kernel_fields(group_dtypes(group), group_params(inputs, outputs)),
        prelude=group_prelude(group),
        block=block,
        U=U,
        min_blocks=max(1, config.balanced_threads // block),
        idx_t=idx_t,
        off_t=off_t,
        offsets=offsets,
        per=per,
        cases=cases,
        classes=fields,
        slots=slots,
        cls_of=cls_of,
    )
    stem = _stem(group, outputs) + f"_x{len(segs)}"
    k = finish(stem, source, grid, block, len(inputs), n_outputs=len(outputs))
    return dataclasses.replace(k, in_place_safe=False)


def _dataflow_order(seg: list[Op], outs: list[Value]) -> list[Op]:
    """seg's ops in an order that depends only on its dataflow: each output's ops depth-first (operands
    in order, each op after those it reads), then the ops no output reads, in seg's order. Segments
    that compute the same function of their inputs then read them in the same order and share one
    class, however the schedule interleaved their ops (a bias's gradient reshaped before its update)."""
    inside = {op.out: op for op in seg}
    done: dict[Op, None] = {}
    for root in [inside[v] for v in outs if v in inside] + list(seg):
        if root in done:  # (with every op it reads: an op is done after them)
            continue
        stack = [(root, iter(root.inputs))]
        while stack:
            op, rest = stack[-1]
            nxt = next((inside[v] for v in rest if v in inside and inside[v] not in done), None)
            if nxt is None:
                stack.pop()
                done.setdefault(op)
            else:
                stack.append((nxt, iter(nxt.inputs)))
    return list(done)


def _table_cases(fields: list[dict], cls_of: list[int], slots: list[int], wiring: list[list[tuple[str, str]]],
                 sizes: list[int]) -> list[str]:
    """The balanced kernel's switch cases, one per segment: the parameters its class's row takes
    (L{c}_in{j} = in{k}). A pointer that every segment of a class takes from the same parameter (an
    optimizer's learning rate) is set once where the class's pointers are declared, not in each case:
    NVRTC's time grows with the cases' assignments, and a 75-tensor update has hundreds of them."""
    same: list[dict[str, str]] = []
    for c, f in enumerate(fields):
        wires = [dict(w) for w, k in zip(wiring, cls_of) if k == c]
        same.append({m: p for m, p in wires[0].items() if all(w[m] == p for w in wires)})
        members = [m for m, _ in wiring[cls_of.index(c)]]  # in the order of f["pointers"]
        f["pointers"] = [line.replace("= nullptr;", f"= {same[c][m]};") if m in same[c] else line
                         for line, m in zip(f["pointers"], members)]
    return [
        " ".join([f"L{c}_{m} = {p};" for m, p in w if m not in same[c]] + [f"n = {n}u; cls = {c}; slot = {slot};"])
        for w, c, slot, n in zip(wiring, cls_of, slots, sizes)
    ]


def _first_at(values: list[Value]) -> dict[Value, int]:
    """Each value's first position in values."""
    at: dict[Value, int] = {}
    for i, v in enumerate(values):
        at.setdefault(v, i)
    return at


def _probe(probes: dict, seg: list[Op], lay: Layout, ins: list[Value], outs: list[Value],
           streaming: bool) -> tuple[dict, str]:
    """The fields of a balanced kernel's segment with its pointers read from a table row (R.), and
    the text of those but its size and description (what tells the segments' classes apart), made
    once per segment alike (`probes`: _canonical_segment -> both)."""
    alike = _canonical_segment(seg, ins, outs)
    got = probes.get(alike)
    if got is None:
        fields = _MapSegment(seg, lay, ins, outs, "p_", "R.", streaming, ordered=True).template_fields(ins, outs)
        got = probes[alike] = (fields, repr({k: f for k, f in fields.items() if k not in ("n", "what")}))
    return got


def _canonical_segment(seg: list[Op], ins: list[Value], outs: list[Value]) -> tuple:
    """What a segment's fields (_MapSegment.template_fields) depend on, with values numbered from its
    inputs (the update of another parameter of the same shape gives the same key): its ops as IR text,
    its inputs' types and which values it writes, which decide its layout too (indexmap.derive reads
    nothing else of them). plan.build.canonical_group's rule, for one segment of a kernel."""
    local = {v: i for i, v in enumerate(ins)}
    lines = []
    for op in seg:
        for v in (*op.inputs, op.out):
            if v not in local:
                local[v] = len(local)
        lines.append(op_key(op, local))
    return tuple(str(v.type) for v in ins), tuple(local[v] for v in outs), tuple(lines)


def _class_fields(seg: list[Op], lay: Layout, ins: list[Value], outs: list[Value], body: dict, c: int) -> dict:
    """The template fields of class c: its body (pointers p_in{j}, p_out{j} read from table row R per
    item: `locals`; scalars R.s{k}), the row's members and how a block fills a row from a segment's
    pointers L{c}_in{j}, L{c}_out{j} (`pointers`, `sets`)."""
    local = _MapSegment(seg, lay, ins, outs, f"L{c}_", ordered=True)
    fill = local.template_fields(ins, outs)
    walked = [(f"in{j}", f"const {ins[j].dtype.cuda_type}*") for j in local.walked()]
    walked += [(f"out{j}", f"{v.dtype.cuda_type}*") for j, v in enumerate(outs)]
    scalars = [(name[2:], ctype) for ctype, name, _ in body["hoisted_vars"]]
    members = [f"{t} {m};" for m, t in walked + scalars]
    sets = [f"P.{m} = L{c}_{m};" for m, _ in walked]
    sets += [f"P.{m} = {expr};" for (m, _), (_, _, expr) in zip(scalars, fill["hoisted_vars"])]
    if body["vec"] > 1:
        sets.append(f"P.aligned = {fill['aligned']};")
    # the pointers point to global memory: said so, the compiler emits global (not generic) accesses
    locals_ = [f"{t} const p_{m} = R.{m}; __builtin_assume(__isGlobal(p_{m}));" for m, t in walked]
    pointers = ([f"const {v.dtype.cuda_type}* L{c}_in{j} = nullptr;" for j, v in enumerate(ins)]
                + [f"{v.dtype.cuda_type}* L{c}_out{j} = nullptr;" for j, v in enumerate(outs)])
    return dict(body, index=c, members=members, sets=sets, locals=locals_, pointers=pointers, count=0)
