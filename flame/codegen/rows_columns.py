"""Column reductions carried by a row kernel (codegen/fused_rows.py): each thread accumulates the
elements it owns of every row it visits in registers, the block writes its partials to scratch, and
a fold kernel sums them in a fixed order (a LayerNorm's weight and bias gradients beside dx; a
GroupNorm's per-channel sums over channels-last groups)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from flame.codegen import cuda_c
from flame.codegen.elementwise import op_expr
from flame.codegen.kernel import Kernel, finish, group_dtypes, group_header, kernel_fields, render_template, store
from flame.codegen.snippets import accumulator
from flame.ir.graph import FusionGroup, Op, Value
from flame.ir.indexmap import Layout, column_map, contiguous_strides


class RowSegment(Protocol):
    """What the column reductions read of the row segment that carries them (fused_rows.py makes it):
    its column reductions, its row layout, its threads per row (G), elements per thread (E) and per
    vector (V), its row length (R) and whether it runs the new schedule."""

    columns: Sequence[Op]
    lay: Layout
    G: int
    E: int
    V: int
    R: int
    new: bool

# fold kernel block: 32 columns x 32 runs over the partials. 32 runs fold gpt_block_train's
# LayerNorm-backward partials (264 x 1024 x 2) in 4.4 us against 6.0-6.9 with 8, and gpt_train's
# (264 x 768 x 2) in 3.3 against 4.5 (H200 kernel timelines: benchmarks/results/2026-11-29-H200-column-rows/).
FOLD_COLS, FOLD_PHASES = 32, 32
_MAX_GRID = 65535


def scratch_ptr(ctype: str, offset: int) -> str:
    return f"reinterpret_cast<{ctype}*>(reinterpret_cast<char*>(scratch) + {offset})"


class Columns:
    """Column reductions carried by a row kernel's first segment: thread t of row slot s accumulates
    c{n}[j] for element r = lane + j*G of every row it visits. When each result element is one
    element of the row (a layer_norm's dweight: plain), after the row loop the block folds its slots'
    partials in slot order (shared memory) and writes one partial per block to scratch [grid, R] (per
    column op), and the fold kernel sums the grid's partials of each element in a fixed order.
    Otherwise (indexmap.column_map: a result dim is a kept dim, as a GroupNorm's group, or a result
    element sums several elements of a row, as its positions) each slot writes its own partials, the
    grid makes every row a slot visits agree on the kept dims the results depend on (column_period),
    and the fold kernel gives each result element a block that sums its terms in a fixed order. A
    slot's partials are [Q] when the row elements a result keeps are its innermost Q, with Q dividing
    G (a GroupNorm's channel within its group): element r then belongs to result r % Q = lane % Q,
    and the slot sums its threads' elements per lane % Q (in j order, warp shuffles, then its warps in
    order); else [R], one per row element. Either way the results do not vary between runs."""

    def __init__(self, seg: RowSegment, outputs: list[Value], grid: int, block: int):
        self.seg, self.R = seg, seg.R
        self.slots_per_block, self.block = block // seg.G, block
        self.plain = not column_period(seg)[1]
        self.P = grid if self.plain else grid * self.slots_per_block
        self.width = [self.R if self.plain else _suffix(seg, op) or self.R for op in seg.columns]
        self.offsets, off = [], 0
        for op, w in zip(seg.columns, self.width):
            self.offsets.append(off)
            off += -(-self.P * w * accumulator(op).dtype.itemsize // 256) * 256
        self.scratch = off
        self.stored = [_stored(op, outputs) for op in seg.columns]

    def declarations(self) -> list[str]:
        accus = [accumulator(op) for op in self.seg.columns]
        return [f"{a.dtype.cuda_type} c{n}[{self.seg.E}];" for n, a in enumerate(accus)] + \
               [f"#pragma unroll\nfor (int j = 0; j < {self.seg.E}; ++j) {{ "
                + " ".join(f"c{n}[j] = {a.identity};" for n, a in enumerate(accus)) + " }"]

    def _each(self, body: str) -> list[str]:
        """body for each element r of the thread's partials c{n}[j] (the row segment's element order)."""
        G, E, V = self.seg.G, self.seg.E, self.seg.V
        if self.seg.new:
            return ["#pragma unroll", f"for (int j = 0; j < {E}; ++j) {{",
                    f"  const idx_t r = ((idx_t)lane + (idx_t)(j / {V}) * {G}u) * {V}u + (idx_t)(j % {V});",
                    f"  if (r < {self.R}u) {body}", "}"]
        return ["#pragma unroll", f"for (int j = 0; j < {E}; ++j) {{",
                f"  const idx_t r = (idx_t)lane + (idx_t)j * {G}u;", f"  if (r < {self.R}u) {body}", "}"]

    def partial_writes(self) -> list[str]:
        S, R = self.slots_per_block, self.R
        if not self.plain:
            return self._slot_writes()
        if S == 1:
            return self._each("{ " + " ".join(
                f"{scratch_ptr(accumulator(op).dtype.cuda_type, off)}[(size_t)blockIdx.x * {R}u + r] = c{n}[j];"
                for n, (op, off) in enumerate(zip(self.seg.columns, self.offsets))) + " }")
        size = S * R * max(accumulator(op).dtype.itemsize for op in self.seg.columns)
        lines = [f"__shared__ __align__(8) unsigned char flame_cols[{size}];"]
        for n, (op, off) in enumerate(zip(self.seg.columns, self.offsets)):
            accu = accumulator(op)
            t = accu.dtype.cuda_type
            lines += ["{", f"  {t}* sm = reinterpret_cast<{t}*>(flame_cols);", "  __syncthreads();"]
            lines += ["  " + x for x in self._each(f"sm[(threadIdx.x / {self.seg.G}u) * {R}u + r] = c{n}[j];")]
            lines += ["  __syncthreads();",
                      f"  for (idx_t r = threadIdx.x; r < {R}u; r += {self.block}u) {{",
                      f"    {t} a = sm[r];",
                      f"    for (int s = 1; s < {S}; ++s) a = {accu.combine('a', f'sm[s * {R}u + r]')};",
                      f"    {scratch_ptr(t, off)}[(size_t)blockIdx.x * {R}u + r] = a;", "  }", "}"]
        return lines

    def _slot_writes(self) -> list[str]:
        """Each slot's partials: [Q] summed over its threads (_suffix), else [R] as they are."""
        G, E, S = self.seg.G, self.seg.E, self.slots_per_block
        slot = "((size_t)blockIdx.x" + (f" * {S}u + threadIdx.x / {G}u)" if S > 1 else ")")
        lines = []
        if any(w < self.R for w in self.width):
            lines.append(f"__shared__ __align__(8) unsigned char flame_cols[{self.block * 8}];")
        for n, (op, off, w) in enumerate(zip(self.seg.columns, self.offsets, self.width)):
            accu = accumulator(op)
            t = accu.dtype.cuda_type
            dst = f"{scratch_ptr(t, off)}[{slot} * {w}u + "
            if w == self.R:
                lines += self._each(f"{dst}r] = c{n}[j];")
                continue
            step = max(w, 32)
            lines += ["{", f"  {t} v = c{n}[0];",
                      f"  for (int j = 1; j < {E}; ++j) v = {accu.combine('v', f'c{n}[j]')};"]
            if w < 32:
                lines.append(f"  for (int d = 16; d >= {w}; d >>= 1) {{ "
                             f"const {t} b = __shfl_xor_sync(0xffffffffu, v, d); v = {accu.combine('v', 'b')}; }}")
            lines += [f"  {t}* sm = reinterpret_cast<{t}*>(flame_cols);", "  __syncthreads();",
                      "  sm[threadIdx.x] = v;", "  __syncthreads();",
                      f"  if (lane < {w}) {{",
                      f"    const {t}* mine = sm + threadIdx.x;", f"    {t} a = mine[0];",
                      f"    for (int k = 1; k < {G // step}; ++k) a = {accu.combine('a', f'mine[k * {step}]')};",
                      f"    {dst}lane] = a;", "  }", "}"]
        return lines

    def fold(self, at: str) -> list[dict]:
        """Per column reduction, the fold template's fields; `stores`: the statements writing its
        result element `at` (its own result and the conversions of it the kernel holds)."""
        out = []
        for n, (op, off) in enumerate(zip(self.seg.columns, self.offsets)):
            accu = accumulator(op)
            count = math.prod(op.inputs[0].shape) // max(1, math.prod(op.out.shape))
            total = cuda_c.convert(accu.total("a", f"{count}u"), accu.dtype, op.out.dtype)
            value = cuda_c.load(total, op.out.dtype)  # the result, rounded to its dtype, in its compute type
            if [v for _, v in self.stored[n]] == [op.out]:
                stores = [f"out{self.stored[n][0][0]}[{at}] = {store(op.out, value)};"]
            else:  # conversions of the result: bound once, each stored rounded as its kernel would
                stores = [f"const {cuda_c.compute_dtype(op.out.dtype).cuda_type} folded = {value};"]
                for o, v in self.stored[n]:
                    if v is not op.out:
                        expr, expr_dtype = op_expr(v.producer, ["folded"])
                        stores.append(f"out{o}[{at}] = "
                                      f"{store(v, cuda_c.load(cuda_c.convert(expr, expr_dtype, v.dtype), v.dtype))};")
                    else:
                        stores.append(f"out{o}[{at}] = {store(v, 'folded')};")
            w = self.width[n]
            out.append(dict(acc_t=accu.dtype.cuda_type, identity=accu.identity, offset=off,
                            combine=accu.combine("a", "p[(size_t)s * R + r]"),
                            combine_phase=accu.combine("a", f"sm[h * {FOLD_COLS}u + threadIdx.x]"),
                            combine_slot=accu.combine("a", f"p[(size_t)s * {w}u + r]"),
                            combine_b=accu.combine("a", "b"), stores=stores,
                            n_out=math.prod(op.out.shape), **({} if self.plain else self._preimage(op, w < self.R))))
        return out

    def _preimage(self, op: Op, summed: bool) -> dict:
        """The fold's walk over the partials of result element o of a general column reduction: o's
        coords give the kept coords (a row u0 = `row`) and reduced coords (an element r0 = `elem`) it
        fixes; term t = (free kept index) * RF + (free reduced index) adds slot u0 + (free kept coords)
        (the first row of that slot: a row past the slots ends the walk, rows only grow with t) at
        element r0 + (free reduced coords); with `summed` partials ([Q]: _suffix) no reduced dim is
        free."""
        lay = self.seg.lay
        n_kept = len(lay.domain) - lay.n_red
        cm = column_map(op, lay.stores[op.inputs[0]], lay.domain, lay.n_red)
        stride = [*contiguous_strides(lay.domain[:n_kept]), *contiguous_strides(lay.domain[n_kept:])]
        fixed = {d: k for k, row in enumerate(cm.rows) for d, c in enumerate(row) if c}  # domain dim -> result dim
        lines, terms = ["idx_t oc = o;"], {"row": [], "elem": []}
        shape = op.out.shape
        for k in range(len(shape) - 1, -1, -1):
            d = next((d for d, kk in fixed.items() if kk == k), None)
            if d is None:
                continue
            lines.append(f"const idx_t o{k} = oc % {shape[k]}u; oc /= {shape[k]}u;")
            terms["row" if d < n_kept else "elem"].append(f"o{k} * {stride[d]}u")
        free_k = [d for d in range(n_kept) if d not in fixed and lay.domain[d] != 1]
        free_r = [] if summed else [d for d in range(n_kept, len(lay.domain)) if d not in fixed and lay.domain[d] != 1]
        RF = math.prod(lay.domain[d] for d in free_r)
        walk = [f"idx_t tk = t / {RF}u, tr = t % {RF}u;", "idx_t u = row, r = elem;"]
        for name, dims in (("tk", free_k), ("tr", free_r)):
            for d in reversed(dims):
                walk.append(f"{'u' if name == 'tk' else 'r'} += ({name} % {lay.domain[d]}u) * {stride[d]}u; "
                            f"{name} /= {lay.domain[d]}u;")
        return dict(coords=lines, row=" + ".join(terms["row"]) or "0", elem=" + ".join(terms["elem"]) or "0",
                    T=math.prod(lay.domain[d] for d in free_k) * RF, walk=walk)


def _stored(op: Op, outputs: list[Value]) -> list[tuple[int, Value]]:
    """(output index, value) of what the fold writes for column reduction op: its result where the
    kernel writes it, and the result of each conversion of it the kernel holds (fuse_columns.store_conversions:
    a bf16 LayerNorm's f32 dweight as the parameter's bf16)."""
    got = [(k, v) for k, v in enumerate(outputs)
           if v is op.out or (v.producer is not None and v.producer.inputs and v.producer.inputs[0] is op.out)]
    if not got or any(v is not op.out and len(v.producer.inputs) != 1 for _, v in got):
        raise NotImplementedError(f"the results of column reduction {op.name} {op.out.type} in its row kernel")
    return got


def _suffix(seg: RowSegment, op: Op) -> int | None:
    """Q when the row elements column reduction op keeps are the innermost Q of the row (its result
    element of row element r depends on r % Q only) and Q divides the threads per row G, so that all
    of a thread's elements r = lane + j*G belong to one result element; else None."""
    if seg.new and seg.V > 1:
        return None  # vector schedule: a thread's elements are V-wide runs, not lane + j*G (see _each)
    lay = seg.lay
    n_kept = len(lay.domain) - lay.n_red
    cm = column_map(op, lay.stores[op.inputs[0]], lay.domain, lay.n_red)
    red = [d for d in range(n_kept, len(lay.domain)) if lay.domain[d] != 1]
    kept = [d for d in red if cm.depends_on(range(d, d + 1))]
    if kept != red[len(red) - len(kept):]:
        return None
    q = math.prod(lay.domain[d] for d in kept)
    return q if q < seg.R and seg.G % q == 0 else None


def column_period(seg: RowSegment) -> tuple[int, bool]:
    """(P, general) of a row segment's column reductions: rows u and u + k*P agree on every kept dim
    a result depends on (P: the product of the kept dims from the outermost such dim in), and general
    when some result element is not exactly one element of the row (see Columns)."""
    lay = seg.lay
    n_kept = len(lay.domain) - lay.n_red
    red_shape = lay.domain[n_kept:]
    period, general = 1, False
    for op in seg.columns:
        cm = column_map(op, lay.stores[op.inputs[0]], lay.domain, lay.n_red)
        if cm is None:
            raise NotImplementedError(f"{op.name} {op.inputs[0].type} is no column reduction of its row kernel")
        kept = [d for d in range(n_kept) if cm.depends_on(range(d, d + 1))]
        if kept:
            period = max(period, math.prod(lay.domain[kept[0]:n_kept]))
        _, strides = cm.flat(op.out.shape)
        want = contiguous_strides(red_shape)
        general |= bool(kept) or any(strides[n_kept + i] != want[i] for i, n in enumerate(red_shape) if n != 1)
    return period, general


def column_fold(group: FusionGroup, inputs: list[Value], cols: Columns, stem: str, params: str) -> Kernel:
    """The kernel folding the column partials: 32 columns x 8 runs per block when each result element
    is one row element (plain), else one block per result element (its preimage's terms)."""
    header = group_header(group, inputs, f"fold of {cols.P} partials x {cols.R} per column reduction")
    common = dict(**kernel_fields(group_dtypes(group), params), P=cols.P, R=cols.R,
                  columns=cols.fold("r" if cols.plain else "o"))
    n_out = len(group.outputs)
    if cols.plain:
        fold = render_template("fused_rows_fold.cu.j2", header=header, cols=FOLD_COLS, phases=FOLD_PHASES, **common)
        return finish(f"{stem}_fold", fold, min(-(-cols.R // FOLD_COLS), _MAX_GRID), FOLD_COLS * FOLD_PHASES,
                      len(inputs), n_outputs=n_out)
    fold = render_template("fused_rows_fold_map.cu.j2", header=header, **common)
    grid = min(max(c["n_out"] for c in common["columns"]), _MAX_GRID)
    return finish(f"{stem}_fold", fold, grid, 256, len(inputs), n_outputs=n_out)
