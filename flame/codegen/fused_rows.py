"""Row kernels of fused groups (templates/fused_rows.cu.j2): reductions over the innermost dims with
their elementwise prologue and epilogue. Two schedules (Config.rows_schedule / FLAME_ROWS_SCHEDULE:
"old", "new", or the default "auto": "new" for kernels without column reductions, or with column
reductions only (no row total: a channels-last BatchNorm's statistics) over rows of at most 1024
vectors, or with column reductions beside row totals over rows of at least Config.columns_new_min
elements (held data up to Config.columns_row_regs registers), whose per-element reads and writes
index the domain itself (_plain; for column sums only, values broadcast over kept dims too), "old"
for the others. Measured with the rows_schedules script on an H100, "new" runs softmax [131072,
1024] bf16 in 215 us against 314, cross-entropy [8192, 32768] in 516 against 702, LayerNorm forward
in 19.7 against 20.8 and an RMSNorm backward carrying its weight gradient [4096, 4096] in 80.7
against 90.9, but gpt_train's LayerNorm backward carrying its weight and bias gradients [8192, 768]
in 39.7-44.5 us against 34.9:

- "old": each row is one warp (R <= 256 elements, 8 rows per block) or one block of 128 / 512 / 1024
  threads (by R alone). A thread owns elements r = lane + j*G of its row, loaded one by one; for rows
  of at most Target.row_cache elements the external inputs read per element are loaded once into
  registers (compute type) and every pass over the row works from them; longer rows re-read global
  memory in each pass. A block-wide reduction takes two barriers.
- "new": a thread owns vectors t = lane + j*G of V contiguous elements (16-byte loads and stores
  where every per-element access walks the row contiguously and rows start on whole vectors; a
  kernel-wide alignment check picks a same-order element-by-element copy of the row loop otherwise);
  registers hold the row in its storage type; the threads per row G (codegen/row_threads.py) are, for
  rows of at most 16 vectors with no column sums, the fewest that give each a vector (several rows
  to a warp, shuffles among a row's lanes: Config.sub_warp_rows, off by default), else the fewest (a warp first:
  shuffles only, no barrier, 8 rows per block) at which the held data fits Config.row_regs
  registers, or, with column sums only, the fewest (4, 8 or 16) whose one vector each covers the row
  (resnet_block_train's BatchNorm statistics [262144 rows x 128] bf16 on an H100: 16 threads per
  row, 32 rows per block, forward sums 31 us against 37 on "old", backward ones 79-151 us against
  88-194, 85-90% of copy: benchmarks/results/2026-11-27-H100-batchnorm-rows/); a block-wide reduction
  takes one barrier (one shared slot per reduction of the row);
  values with a transcendental that a later pass reads again (softmax's exp(x - max)) are kept in
  registers from the pass that computes them (Config.row_carry), so each is computed once.
Passes (both schedules, `_schedule`): one computes every reduction whose input reads no reduction of
that pass or later, each as late as what reads its result allows, and the per-element stores join the
first pass that has every result they read (Config.merge_row_passes): an RMSNorm is two passes (its
statistic; the stores with the output's amax beside them), a LayerNorm three.
Per-row values (reduction results and what is computed from them) are computed once per thread, from
totals that every thread of the row holds identically. Column reductions (sums over the rows, a
LayerNorm's weight and bias gradients) ride along in either schedule: each thread owns fixed
elements of every row it visits and accumulates them in registers."""

from __future__ import annotations

import math
from dataclasses import replace

from flame.codegen import cuda_c, views
from flame.codegen.fused import Emitter, own_indexed, prepare
from flame.codegen.kernel import (
    Config,
    Kernel,
    finish,
    group_dtypes,
    group_header,
    group_params,
    group_prelude,
    index_types,
    kernel_fields,
    merge_row_passes,
    render_template,
    row_stream_min,
    rows_schedule,
    store,
)
from flame.codegen.row_threads import narrow_threads, new_threads, old_threads, stream_threads
from flame.codegen.rows_columns import Columns, column_fold, column_period, scratch_ptr
from flame.codegen.snippets import accumulator
from flame.ir import symbolic
from flame.ir.graph import FusionGroup, Op, Value
from flame.ir.indexmap import IndexMap, Layout, contiguous_strides, identity, is_reduction, row_map
from flame.ir.registry import get, is_costly
from flame.target import Target

_MAX_GRID = 65535


_COLUMN_BLOCK = 512  # threads of a block that carries column partials (several rows of <= 128 threads)
_COLUMN_SMEM = 32768  # bytes of shared memory its slots' partials may take when the block folds them


def _block(G: int, M: int, R: int, columns: tuple[Op, ...], row_totals: bool = True) -> int:
    """Threads per block. Warp rows: 8 per block (no barriers). A row kernel carrying column reductions
    runs several wider (or, without row totals, narrower) rows per block (fewer, larger per-block
    partials, more threads per SM) when every step of the row loop keeps all of a block's rows real
    (M divisible by the rows per block: the rows' barriers stay uniform; no matter without
    row_totals, whose rows take no barrier) and the rows' partials fit in shared memory; else one row."""
    if G == 32 or (G < 32 and not columns):  # a warp per row, or several rows to a warp
        return 256
    S = _COLUMN_BLOCK // G
    acc = max((accumulator(op).dtype.itemsize for op in columns), default=0)
    if columns and S > 1 and (not row_totals or M % S == 0) and S * R * acc <= _COLUMN_SMEM:
        return _COLUMN_BLOCK
    return G


def _split(view: views.View, n_kept: int) -> tuple[views.View, views.View]:
    return views.View(view.base, view.strides[:n_kept]), views.View(0, view.strides[n_kept:])


def _offset(kept: views.View, red: views.View, kc: str, rc: str) -> tuple[str, str]:
    """(per-row part with the base, per-element part) of a flat offset."""
    k = views.offset_expr(kept, kc)
    r = " + ".join(f"{rc}{d} * {s}" if s != 1 else f"{rc}{d}" for d, s in enumerate(red.strides) if s) or "0"
    return k, r


def _row_kernel_name(group: FusionGroup, columns: tuple[Op, ...]) -> str:
    """What a row kernel is named after: the composite an op of it names for its row reductions (the
    OpDef trait row_kernels; softmax, layer_norm, ...; several: the op first by name), else the stems
    of its first three reductions (sum_sum)."""
    reds = tuple(op.name.removeprefix("reduce_") for op in group.ops if is_reduction(op) and op not in columns)
    named = sorted((op.name, what) for op in group.ops for key, what in get(op.name).row_kernels if key == reds)
    return named[0][1] if named else "_".join(reds[:3])


class _RowSegment:
    def __init__(self, ops: list[Op], lay: Layout, inputs: list[Value], outputs: list[Value], G: int, seg: int,
                 columns: tuple[Op, ...], config: Config, target: Target, split: tuple[int, int] | None = None,
                 new: bool = False, carry: bool = False, hold: bool = True):
        self.ops, self.lay, self.G, self.seg, self.columns = ops, lay, G, seg, columns
        self.row_barriers, self.block = config.row_barriers, G  # block: set by lower_rows before body()
        self.merge = merge_row_passes(config)
        self.passes = 0  # passes over the row (body() counts them: _schedule)
        self.in_idx = {v: i for i, v in enumerate(inputs)}
        self.out_idx = {v: outputs.index(v) for v in lay.stores if v in outputs}  # others: column inputs
        rank = len(lay.domain)
        self.n_kept = rank - lay.n_red
        kept_shape, red_shape = lay.domain[: self.n_kept], lay.domain[self.n_kept:]
        self.M, self.R = math.prod(kept_shape), math.prod(red_shape)
        # split: each row is cut into P chunks of CH elements, one per row slot; a chunk is then
        # processed as a row of its own whose reductions write partials (scratch [M, P]) for the fold
        self.P, self.CH = split or (1, self.R)
        self.partials = _partial_offsets([op for op in ops if is_reduction(op)], self.M * self.P) if split else {}
        inside = {op.out for op in ops}
        self.values = inside
        loads = [(v, m) for v, ms in lay.maps.items() if v not in inside for m in ms]
        indexed = [(op.out, m) for op in ops if own_indexed(op) for m in lay.maps.get(op.out, [])]
        self.keys = loads + list(lay.stores.items()) + indexed
        flat = [views.View(*m.flat(v.shape)) for v, m in self.keys]
        parts = [_split(f, self.n_kept) for f in flat]
        self.kdims, kv = views.collapse(kept_shape, [p[0] for p in parts])
        self.rdims, rv = views.collapse(red_shape, [p[1] for p in parts])
        self.off = {k: _offset(a, b, "k", "q") for k, a, b in zip(self.keys, kv, rv)}
        self.kguard = {k: [d for d, s in enumerate(a.strides) if s == 0] for k, a in zip(self.keys, kv)}
        self.rguard = {k: [d for d, s in enumerate(b.strides) if s == 0] for k, b in zip(self.keys, rv)}
        self.red = range(self.n_kept, rank)
        self.loads = loads
        # "new": what a thread touches element by element (per-element inputs and outputs) moves by vectors
        # (split: within its chunk, whose start cb is a whole number of vectors: CH is a whole number of warps'
        # elements)
        self.new = new
        # loads inside a piece of a piecewise op: read element by element where the piece holds, never ahead
        self.guarded = {k for k in loads if k in lay.guarded}
        self.memory = [k for k in loads if k[1].depends_on(self.red) and k not in self.guarded] + \
                      [(v, m) for v, m in lay.stores.items() if m.depends_on(self.red) and v in self.out_idx]
        self.V = _vector_width(self.memory, dict(zip(self.keys, zip(kv, rv))), self.rdims, self.R) if self.new else 1
        self.J = -(-self.CH // (G * self.V))  # vectors (of V elements) per thread
        self.E = self.J * self.V  # elements per thread
        # per-element inputs held in registers: all of them, or (cache_invariant off) those that differ
        # between rows; a row-invariant one (a weight) is then re-read from the cache where it is used
        reg = {k for k in loads if k[1].depends_on(self.red) and k not in self.guarded
               and (config.cache_invariant or len(self.kguard[k]) < len(self.kdims))}
        # a row of dynamic length is streamed: registers are arrays of a length fixed when NVRTC compiles
        static = not isinstance(self.CH, symbolic.SymInt)
        if self.new:  # lower_rows picks G so that data_regs() fits Config.row_regs
            self.cached = static and hold and 0 < self.CH <= target.row_cache
        else:  # registers per thread for the row: at most reg_budget[G] (1024 threads leave 64 per thread)
            self.cached = static and 0 < self.CH <= target.row_cache and \
                len(reg) * self.E <= dict(config.reg_budget).get(G, 64)
        self.reg = reg if self.cached else set()
        self.aligned = True  # "new": the row loop being emitted moves whole vectors (else element by element)
        self.carry: set = set()  # "new": values kept in registers from the pass that computes them ...
        self._carried: dict = {}  # ... those computed so far (key -> register element)
        self._passes: list[set] = []  # the per-element values each pass computes ...
        self._reads: list[set] = []  # ... and the held inputs it reads (data_regs)
        self._read: set = set()
        self._used: dict = {}  # the streamed inputs the pass being emitted reads (vector loads at its top)
        self._vdecls: list[str] = []  # the output vectors of the pass being emitted ...
        self._vstores: list[str] = []  # ... and their stores
        if self.new and self.cached:  # rows' own inputs held; one the same for every row (a weight) if it fits
            varying = {k for k in self.reg if len(self.kguard[k]) < len(self.kdims)}
            self.reg = varying
            self.carry = self.carry_candidates() if carry else set()
            if reg - varying:
                self.reg = reg
                if self.data_regs() > config.row_regs:
                    self.reg = varying

    def data_regs(self) -> int:
        """32-bit registers per thread of the row's held data at its peak over the passes: held
        inputs (compute type: the compiler converts them once) from the top to the last pass reading
        them, carried values from the pass after the one computing them, column partials throughout."""
        self._passes, self._reads = [], []
        self.body()

        def size(v: Value) -> int:
            return self.E * -(-cuda_c.compute_dtype(v.dtype).itemsize // 4)

        last = {k: max(i for i, r in enumerate(self._reads) if k in r) for k in self.reg
                if any(k in r for r in self._reads)}
        born = {k: i for i, c in enumerate(self._passes) for k in c if k in self.carry}
        peak = max((sum(size(k[0]) for k, n in last.items() if n >= p)
                    + sum(size(k[0]) for k, b in born.items() if b < p) for p in range(len(self._passes))), default=0)
        return peak + sum(self.E * -(-accumulator(op).dtype.itemsize // 4) for op in self.columns)

    def carry_candidates(self) -> set:
        """Per-element values with a transcendental that more than one pass computes."""
        self._passes, self._reads, self.carry = [], [], set()
        self.body()
        seen: dict = {}
        for keys in self._passes:
            for k in keys:
                seen[k] = seen.get(k, 0) + 1
        return {k for k, n in seen.items() if n > 1 and k[0].producer is not None and k[0] in self.values
                and is_costly(k[0].producer, transcendental=True)}

    @property
    def _e(self) -> str:
        """The index of the current element among the thread's E elements."""
        return "j" if not self.new else f"j * {self.V} + v"

    def _load(self, v: Value, m: IndexMap) -> str:
        k, r = self.off[(v, m)]
        key = self.loads.index((v, m))
        if not m.depends_on(self.red):
            return cuda_c.load(f"in{self.in_idx[v]}[rb{key}]", v.dtype)
        if (v, m) in self.guarded:
            return cuda_c.load(f"in{self.in_idx[v]}[rb{key} + {r}]", v.dtype)
        if (v, m) in self.reg:
            self._read.add((v, m))
            return cuda_c.load(f"x{key}[j].v[v]", v.dtype) if self.new else f"x{key}[j]"
        if self.new:  # loaded as a vector at the top of the thread's step (_loop)
            self._used[(v, m)] = None
            return cuda_c.load(f"w{key}.v[v]", v.dtype)
        return cuda_c.load(f"in{self.in_idx[v]}[rb{key} + {r}]", v.dtype)

    def _vload(self, dst: str, key: tuple[Value, IndexMap]) -> str:
        """dst (a flame_vec) = the V elements of input `key` at the thread's vector t."""
        v, _ = key
        at = f"in{self.in_idx[v]} + (rb{self.loads.index(key)} + {self._chunk}(off_t)t * {self.V})"
        if self.aligned:
            return f"{dst} = *reinterpret_cast<const {_vec(v, self.V)}*>({at});"
        return f"for (int v = 0; v < {self.V}; ++v) {dst}.v[v] = ({at})[v];"

    def _own(self, v: Value, m: IndexMap) -> str:
        k, r = self.off[(v, m)]
        return f"{k} + {r}"

    def _loop(self, body: list[str], unrolled: bool = False) -> list[str]:
        if self.new:
            return self._vector_loop(body, unrolled)
        q = [f"idx_t qr = {'cb + r' if self.P > 1 else 'r'};"] if self.rdims else []
        for d in range(len(self.rdims) - 1, 0, -1):
            q.append(f"const off_t q{d} = (off_t)(qr % {self.rdims[d]}u); qr /= {self.rdims[d]}u;")
        if self.rdims:
            q.append("const off_t q0 = (off_t)qr;")
        inner = ["  " + line for line in q + body]
        if self.cached or unrolled:  # element j of the thread: registers x{k}[j], column partials c{n}[j]
            return ["#pragma unroll", f"for (int j = 0; j < {self.E}; ++j) {{",
                    f"  const idx_t r = (idx_t)lane + (idx_t)j * {self.G}u;", f"  if (r < {self._end}) {{",
                    *["  " + x for x in inner], "  }", "}"]
        return [f"for (idx_t r = (idx_t)lane; r < {self._end}; r += {self.G}u) {{", *inner, "}"]

    def _vector_loop(self, body: list[str], unrolled: bool) -> list[str]:
        """"new": the thread's vectors t = lane + j*G, each V contiguous elements r = t*V + v (one
        collapsed reduced dim when V > 1); the streamed inputs the pass reads are loaded and its
        outputs stored one vector per t."""
        V = self.V
        q = []
        if self.rdims:
            q = ["idx_t qr = r;"] + [f"const off_t q{d} = (off_t)(qr % {self.rdims[d]}u); qr /= {self.rdims[d]}u;"
                                     for d in range(len(self.rdims) - 1, 0, -1)] + ["const off_t q0 = (off_t)qr;"]
        pre = []
        for k in self._used:
            w = f"w{self.loads.index(k)}"
            pre += [f"{_vec(k[0], V)} {w};", self._vload(w, k)]
        core = pre + self._vdecls + ["#pragma unroll", f"for (int v = 0; v < {V}; ++v) {{",
                                     f"  const idx_t r = {self._chunk}t * {V}u + (idx_t)v;",
                                     *["  " + x for x in q + body], "}"]
        core += self._vstores
        self._used, self._vdecls, self._vstores = {}, [], []
        if self.cached or unrolled:  # vector j of the thread: registers x{k}[j], partials c{n}[j*V+v]
            return ["#pragma unroll", f"for (int j = 0; j < {self.J}; ++j) {{",
                    f"  const idx_t t = (idx_t)lane + (idx_t)j * {self.G}u;", f"  if (t * {V}u < {self._end}) {{",
                    *["    " + x for x in core], "  }", "}"]
        return [f"for (idx_t t = (idx_t)lane; t * {V}u < {self._end}; t += {self.G}u) {{",
                *["  " + x for x in core], "}"]

    def aligned_check(self) -> list[str]:
        """Conditions that every pointer the row reads or writes by vectors is aligned to a vector."""
        if self.V == 1:
            return []
        loads = set(self.loads)
        ptrs = {f"in{self.in_idx[v]}" if (v, m) in loads else f"out{self.out_idx[v]}": self.V * v.dtype.itemsize
                for v, m in self.memory}
        return [f"reinterpret_cast<unsigned long long>({p}) % {n}u == 0" for p, n in ptrs.items()]

    @property
    def _end(self) -> str:
        return "RC" if self.P > 1 else "R"

    @property
    def _chunk(self) -> str:
        """"new", split rows: the chunk's first element, before a thread's vector offset."""
        return "cb + " if self.P > 1 else ""

    def _schedule(self) -> tuple[list[tuple[Op, int]], int, int | None]:
        """The row's passes: ([(reduction, its pass)] in op order, the number of passes, the pass of the
        per-element stores and column partials or None). With Config.merge_row_passes a pass computes
        every reduction whose input reads no reduction of that pass or later (reductions whose result is
        read in the row go in the pass before the first that reads it, the others in the last), and
        the stores go in the first pass that has every reduction they read; else each reduction has a
        pass of its own, in op order, and the stores a last one (FLAME_MERGE_ROW_PASSES=0).
        A reduction nothing stored reads is not computed (a pad of its zero-size result reads none of
        it: the layout holds no map for it or its operands)."""
        reds = [op for op in self.ops if is_reduction(op) and op.out in self.lay.maps]
        stored = [v for v, m in self.lay.stores.items() if m.depends_on(self.red) and v in self.out_idx]
        stored += [op.inputs[0] for op in self.columns]
        if not self.merge:
            return [(op, n) for n, op in enumerate(reds)], len(reds) + bool(stored), len(reds) if stored else None
        level: dict[Value, int] = {}  # the first pass that can compute a per-element value
        reads: dict[Value, frozenset] = {}  # the reductions whose results a value reads
        for op in self.ops:
            level[op.out] = max((level.get(u, 0) for u in op.inputs), default=0)
            reads[op.out] = frozenset().union(*(reads.get(u, frozenset()) for u in op.inputs))
            if op in reds:
                level[op.out] += 1
                reads[op.out] |= {op}
        S = max((level.get(v, 0) for v in stored), default=None)
        count = max([level[op.out] - 1 for op in reds] + [-1 if S is None else S]) + 1
        at: dict[Op, int] = {}
        for op in reversed(reds):  # as late as what reads it allows: a pass that loads its inputs anyway
            later = [at[r] for r in at if op in reads.get(r.inputs[0], ())]
            later += [S for v in stored if op in reads.get(v, ())]
            at[op] = min(later, default=count) - 1
        return [(op, at[op]) for op in reds], count, S

    def _reduction(self, em: Emitter, op: Op, out: list[str], nth: int, a: str) -> None:
        """Combine accumulator `a` of reduction `op` (its pass's loop done) across the row's threads;
        then its total is the row's value of op.out (or, split, the chunk's partial is written)."""
        accu = accumulator(op)
        acc = accu.dtype
        if self.G > 1:  # lane 0 of each row's (or row warp's) lanes folds them: shuffles stay among those lanes
            out.append(f"for (int d = {min(self.G, 32) // 2}; d > 0; d >>= 1) {{ const {acc.cuda_type} b = "
                       f"__shfl_down_sync(0xffffffffu, {a}, d); {a} = {accu.combine(a, 'b')}; }}")
        sync = self.barrier()
        if self.G <= 32:  # the row's lanes are one warp's or fewer: lane 0's total to each (a lone thread has it)
            if self.G > 1:
                out.append(f"{a} = __shfl_sync(0xffffffffu, {a}, 0{f', {self.G}' if self.G < 32 else ''});")
        elif self.slots:  # one shared slot per reduction of the row: one barrier (rows_red says why)
            sm = f"reinterpret_cast<{acc.cuda_type}*>(row_red + {nth} * slot)"
            out += [f"if (lane % 32 == 0) {sm}[lane / 32] = {a};", sync, f"{a} = {sm}[0];",
                    "#pragma unroll",
                    f"for (int w = 1; w < {self.G // 32}; ++w) {a} = {accu.combine(a, f'{sm}[w]')};"]
            if self.reductions == 1:  # the next row's reduction reuses the slot: all have read it first
                out.append(sync)
        else:
            sm = f"reinterpret_cast<{acc.cuda_type}*>(row_red)"
            out += [f"if (lane % 32 == 0) {sm}[lane / 32] = {a};", sync, f"{a} = {sm}[0];",
                    f"for (int w = 1; w < {self.G // 32}; ++w) {a} = {accu.combine(a, f'{sm}[w]')};", sync]
        if self.P > 1:  # this chunk's partial; the fold kernel finishes the row
            dst = scratch_ptr(acc.cuda_type, self.partials[op])
            out.append(f"if (lane == 0) {dst}[row * {self.P}u + chunk] = {a};")
            return
        total = accu.total(a, f"{self.R}u")
        name = em.fresh()
        ctype = cuda_c.compute_dtype(op.out.dtype).cuda_type
        out.append(f"const {ctype} {name} = {cuda_c.load(cuda_c.convert(total, acc, op.out.dtype), op.out.dtype)};")
        em.memo_row[(op.out, row_map(op.out, self.lay.domain, self.lay.n_red))] = name

    @property
    def slots(self) -> bool:
        """A shared slot per reduction of the row (one barrier each), else one slot (two barriers)."""
        return self.new or self.row_barriers

    def barrier(self) -> str:
        """The barrier of a reduction across the row's warps: the row's own (a named barrier of its G
        threads, Config.row_barriers: the rows of a block do not wait for each other) where the
        block's rows fit the 15 named barriers, else the block's."""
        rows = self.block // self.G
        if self.row_barriers and 1 < rows < 16:
            return (f'asm volatile("bar.sync %0, %1;" :: "r"(1 + (int)(threadIdx.x / {self.G})), '
                    f'"r"({self.G}) : "memory");')
        return "__syncthreads();"

    def _start_pass(self, em: Emitter) -> None:
        """A pass over the row's elements: per-element values start afresh, but for the carried ones."""
        em.memo_elem, em.elem = dict(self._carried), []

    def _end_pass(self, em: Emitter, body: list[str], unrolled: bool = False) -> list[str]:
        """The pass's loop; the values it computes that are carried go to registers y{n}[e] first."""
        computed = {k for k in em.memo_elem if k not in self._carried}
        self._passes.append(computed)
        self._reads.append(self._read)
        self._read = set()
        decls = []
        for k in sorted(computed & self.carry, key=lambda k: em.memo_elem[k]):
            y = f"y{len(self._carried)}"
            decls.append(f"{cuda_c.compute_dtype(k[0].dtype).cuda_type} {y}[{self.E}];")
            body = body + [f"{y}[{self._e}] = {em.memo_elem[k]};"]
            self._carried[k] = f"{y}[{self._e}]"
        return decls + self._loop(body, unrolled)

    def body(self) -> list[str]:
        self._carried = {}
        out = [f"const idx_t R = {self.R}u;"]
        if self.P > 1:
            out += [f"const idx_t row = o / {self.P}u, chunk = o % {self.P}u, cb = chunk * {self.CH}u;",
                    f"const idx_t RC = min(R - cb, (idx_t){self.CH}u);"]
        if self.kdims:
            out += [f"idx_t kr = {'row' if self.P > 1 else 'o'};"]
            out += [f"const off_t k{d} = (off_t)(kr % {self.kdims[d]}u); kr /= {self.kdims[d]}u;"
                    for d in range(len(self.kdims) - 1, 0, -1)] + ["const off_t k0 = (off_t)kr;"]
        for key, (v, m) in enumerate(self.loads):
            out.append(f"const off_t rb{key} = {self.off[(v, m)][0]};")
            if (v, m) in self.reg and self.new:  # the row's elements in their storage type, by vectors
                out += [f"{_vec(v, self.V)} x{key}[{self.J}];", "#pragma unroll",
                        f"for (int j = 0; j < {self.J}; ++j) {{",
                        f"  const idx_t t = (idx_t)lane + (idx_t)j * {self.G}u;",
                        f"  if (t * {self.V}u < {self._end}) {{ {self._vload(f'x{key}[j]', (v, m))} }}", "}"]
            elif (v, m) in self.reg:
                ctype = cuda_c.compute_dtype(v.dtype).cuda_type
                load = cuda_c.load(f"in{self.in_idx[v]}[rb{key} + {self.off[(v, m)][1]}]", v.dtype)
                out += [f"{ctype} x{key}[{self.E}];"] + self._loop([f"x{key}[j] = {load};"])
        em = Emitter(self.lay, self.values, self._load, self._own, prefix=f"s{self.seg}_")
        reds, passes, stores_at = self._schedule()
        self.passes = passes
        for p in range(passes):
            self._start_pass(em)
            accs = []
            for nth, (op, at) in enumerate(reds):
                if at == p:
                    a = f"acc{len(out)}" + (f"_{len(accs)}" if accs else "")
                    x = em.value(op.inputs[0], identity(len(self.lay.domain)))
                    em.elem.append(f"{a} = {accumulator(op).combine(a, x)};")
                    accs.append((op, nth, a))
            if p == stores_at:
                for v, m in self.lay.stores.items():
                    if m.depends_on(self.red) and v in self.out_idx:
                        em.elem.append(self._write(v, m, em.stored(v, m)))
                for n, op in enumerate(self.columns):  # fold this row's element into the thread's column partials
                    val = em.value(op.inputs[0], self.lay.stores[op.inputs[0]])
                    c = f"c{n}[{self._e}]"
                    em.elem.append(f"{c} = {accumulator(op).combine(c, val)};")
            out += em.row
            em.row = []
            out += [f"{accumulator(op).dtype.cuda_type} {a} = {accumulator(op).identity};" for op, _, a in accs]
            if em.elem:
                out += self._end_pass(em, em.elem, unrolled=p == stores_at and bool(self.columns))
            for op, nth, a in accs:
                self._reduction(em, op, out, nth, a)
        for v, m in self.lay.stores.items():
            if not m.depends_on(self.red) and v in self.out_idx and self.P == 1:
                out.append("if (lane == 0) " + self._write(v, m, em.stored(v, m)))
        return _merge_rows(out, em.row)

    @property
    def reductions(self) -> int:
        return sum(1 for op in self.ops if is_reduction(op))

    def _write(self, v: Value, m: IndexMap, val: str) -> str:
        """The store of v at m, `val` its storage-typed value (Emitter.stored)."""
        k, r = self.off[(v, m)]
        guards = [f"k{d} == 0" for d in self.kguard[(v, m)] if self.kdims] + \
                 [f"q{d} == 0" for d in self.rguard[(v, m)] if m.depends_on(self.red) and self.rdims]
        if self.new and m.depends_on(self.red):  # element v of the output vector, stored after the v loop
            o, vt = self.out_idx[v], _vec(v, self.V)
            at = f"out{o} + ({k} + {self._chunk}(off_t)t * {self.V})"
            st = (f"*reinterpret_cast<{vt}*>({at}) = y_out{o};" if self.aligned
                  else f"for (int v = 0; v < {self.V}; ++v) ({at})[v] = y_out{o}.v[v];")
            self._vdecls.append(f"{vt} y_out{o};")
            self._vstores.append(f"if ({' && '.join(guards)}) {st}" if guards else st)
            return f"y_out{o}.v[v] = {val};"
        write = f"out{self.out_idx[v]}[{k} + {r if m.depends_on(self.red) else '0'}] = {val};"
        return f"if ({' && '.join(guards)}) {write}" if guards else write


def _vec(v: Value, V: int) -> str:
    return f"flame_vec<{v.dtype.cuda_type}, {V}>"


def _vector_width(memory: list, views_of: dict, rdims: tuple, R) -> int:
    """"new": elements per vector of a row's element-by-element memory accesses (1: one by one).
    Every per-element input and output walks the one (collapsed) reduced dim contiguously, and the
    row and each row's start hold whole vectors; V elements of the narrowest dtype are 16 bytes."""
    if not memory or len(rdims) != 1 or not isinstance(R, int) or any(views_of[k][1].strides[0] != 1 for k in memory):
        return 1
    V = 16 // min(v.dtype.itemsize for v, _ in memory)

    def whole(V: int) -> bool:
        return R % V == 0 and all(isinstance(views_of[k][0].base, int) and views_of[k][0].base % V == 0 and all(
            isinstance(s, int) and s % V == 0 for s in views_of[k][0].strides) for k in memory)

    while V > 1 and not whole(V):
        V //= 2
    return V


def _partial_offsets(reductions: list[Op], n: int) -> dict[Op, int]:
    """Byte offsets in scratch of each reduction's n partials (256-byte aligned)."""
    out, off = {}, 0
    for op in reductions:
        out[op] = off
        off += -(-n * accumulator(op).dtype.itemsize // 256) * 256
    return out


def splittable(ops: list[Op], lay: Layout) -> bool:
    """Whether a row segment can run split across blocks: nothing in it reads a reduction's result
    (no epilogue, no reduction of a reduction), and what it writes per row are reduction results
    (the fold kernel writes those); per-element results of the prologue are written chunk by chunk."""
    reds = {op.out for op in ops if is_reduction(op)}
    if any(v in reds for op in ops for v in op.inputs):
        return False
    red = range(len(lay.domain) - lay.n_red, len(lay.domain))
    return all(v in reds for v, m in lay.stores.items() if not m.depends_on(red))


def _split_fold(group: FusionGroup, inputs: list[Value], seg: _RowSegment, stem: str, params: str) -> Kernel:
    """The kernel finishing split rows: one block per row folds its P partials in a fixed order
    (thread t takes chunks t, t+256, ..., then warp shuffles and the 8 warps in order)."""
    outputs = list(group.outputs)
    folds = []
    for op, off in seg.partials.items():
        accu = accumulator(op)
        total = cuda_c.convert(accu.total("a", f"{seg.R}u"), accu.dtype, op.out.dtype)
        folds.append(dict(acc_t=accu.dtype.cuda_type, identity=accu.identity, offset=off,
                          combine=accu.combine("a", "b"), out=outputs.index(op.out) if op.out in outputs else -1,
                          store=store(op.out, cuda_c.load(total, op.out.dtype))))
    what = f"fold of {seg.P} partials per row, {seg.M} rows"
    source = render_template("fused_rows_split_fold.cu.j2", header=group_header(group, inputs, what),
                             **kernel_fields(group_dtypes(group), params), M=seg.M, P=seg.P,
                             folds=[f for f in folds if f["out"] >= 0])
    return finish(f"{stem}_fold", source, min(seg.M, _MAX_GRID), 256, len(inputs), n_outputs=len(outputs))


def _split_schedule(segs: list[list[Op]], lays: list[Layout], columns: tuple[Op, ...], config: Config,
           target: Target) -> tuple[int, int] | None:
    """(P chunks, CH elements per chunk) when the group's rows run split across blocks (few long
    rows, Target.splits_rows, and nothing in the group reads a reduction's result); else None."""
    if len(segs) != 1 or columns:
        return None
    lay = lays[0]
    n_kept = len(lay.domain) - lay.n_red
    M, R = math.prod(lay.domain[:n_kept]), math.prod(lay.domain[n_kept:])
    if not target.splits_rows(M, R) or not splittable(segs[0], lay):
        return None
    CH = config.split_threads * config.split_elements
    return -(-R // CH), CH


def _merge_rows(out: list[str], late: list[str]) -> list[str]:
    """Row statements emitted while writing per-row results go before those writes."""
    if not late:
        return out
    first = next((i for i, x in enumerate(out) if x.startswith("if (lane == 0) ")), len(out))
    return out[:first] + late + out[first:]


def _plain(lays: list[Layout], broadcasts: bool = False) -> bool:
    """Every value the row kernel reads or writes per element of every row is indexed as the domain
    itself (weights the same for every row aside; with `broadcasts`, also values broadcast over some
    kept dims, as a pooled gradient [N, 1, 1, C] over channels-last rows; a reshape read or written
    at the domain's own addresses, _domain_order): no permuted view, so a
    GroupNorm's channels-last groups take the old schedule under "auto" (the new one failed its GPU
    tests there)."""
    for lay in lays:
        n = len(lay.domain)
        kept, red, ident = range(n - lay.n_red), range(n - lay.n_red, n), identity(n)
        maps = [(v, m) for v, ms in lay.maps.items() for m in ms] + list(lay.stores.items())
        if any(m.depends_on(red) and m.depends_on(kept) and m != ident and not _domain_order(v, m, lay.domain)
               and not (broadcasts and _broadcast(v, m, lay.domain)) for v, m in maps):
            return False
    return True


def _domain_order(v: Value, m: IndexMap, domain: tuple) -> bool:
    """v is read at domain coordinates through m at the very addresses the domain's own row-major
    layout has: a reshape of the domain (the [4096, 11008] value behind a [2, 2048, 11008] row
    domain), which the row kernels address as the identity."""
    base, strides = m.flat(v.shape)
    return base == 0 and all(s == w for s, w, d in zip(strides, contiguous_strides(domain), domain) if d != 1)


def _broadcast(v: Value, m: IndexMap, domain: tuple) -> bool:
    """v is read at domain coordinates through m as a broadcast of itself: each of its dims is a domain
    dim of its size or of size 1 (where the domain's is not), in the domain's order."""
    _, strides = m.flat(v.shape)
    want = contiguous_strides(tuple(d if s else 1 for d, s in zip(domain, strides)))
    return len(strides) == len(domain) and all(s in (0, w) for s, w in zip(strides, want))


def _walks_rows(lays: list[Layout]) -> bool:
    """Every value read or written per element of a row walks the row as the domain does (row-major
    over the reduced dims): the "new" schedule addresses element t of a row as `row base + t`. Not
    so: a [16] bias in a kernel reducing [2, 8, 16] whole (read at t % 16: the new schedule read past
    its end and the autocast GPT block's output came out wrong on the GPU), or a [3] output of one
    reducing [2, 3] whole (written where the first coordinate is 0, a guard its vector store after
    the element loop cannot express; found by the random-graph test)."""
    for lay in lays:
        n = len(lay.domain)
        red = [d for d in range(n - lay.n_red, n) if lay.domain[d] != 1]
        want = contiguous_strides(tuple(lay.domain[d] for d in red))
        needed = [(v, m) for v, ms in lay.maps.items() for m in ms] + list(lay.stores.items())
        for v, m in needed:
            if m.depends_on(red) and tuple(m.flat(v.shape)[1][d] for d in red) != want:
                return False
    return True


def lower_rows(group: FusionGroup, config: Config, target: Target) -> list[Kernel]:
    """The row kernel of a fused group (Kind.ROWS); with column reductions (one segment only), also
    the fold kernel; [] when it writes nothing."""
    got = prepare(group)
    if got is None:
        return []
    inputs, segs, lays, columns = got
    if not any(lay.n_red for lay in lays):
        raise NotImplementedError("a rows group without a reduction over the innermost dims")
    outputs = list(group.outputs)
    lengths = [math.prod(lay.domain[len(lay.domain) - lay.n_red:]) for lay in lays]  # each segment's rows
    R = max(lengths)
    # a row whose length is the dynamic size (a whole-batch sum: the count of a loss's kept labels) takes a
    # schedule that reads nothing of that length: a block of 1024 threads per row, no vectors, no split,
    # so one source serves every size
    dynamic_row = isinstance(R, symbolic.SymInt)
    split = None if dynamic_row else _split_schedule(segs, lays, columns, config, target)
    schedule = "old" if dynamic_row else rows_schedule(config)
    column_only = bool(columns) and all(op in columns for seg in segs for op in seg if is_reduction(op))
    # column sums beside row totals (a norm's backward with its weight gradient) over long rows: "new",
    # with Config.columns_row_regs registers of held data (Config.columns_new_min says what was measured)
    long_mixed = (schedule == "auto" and bool(columns) and not column_only and not split
                  and R >= config.columns_new_min and _plain(lays))
    new = ((schedule == "new" or long_mixed or (schedule == "auto" and (not columns and _plain(lays) or column_only
                                                                        and _plain(lays, broadcasts=True))))
           and _walks_rows(lays))
    held_config = config
    if new and long_mixed:
        config = replace(config, row_regs=config.columns_row_regs)

    def make(G: int, carry: bool = False, hold: bool = True) -> list[_RowSegment]:
        return [_RowSegment(seg, lay, inputs, outputs, G, k, columns, config, target, split, new, carry, hold)
                for k, (seg, lay) in enumerate(zip(segs, lays))]

    narrow = narrow_threads(make) if new and column_only else None
    if narrow is None and column_only and schedule == "auto":
        new = False  # rows of over 1024 vectors carrying column sums only: the old schedule is the measured one
    M = sum(math.prod(lay.domain[: len(lay.domain) - lay.n_red]) for lay in lays)
    if new and split:  # a chunk per block of Config.split_threads, by vectors
        G, parts = config.split_threads, make(config.split_threads)
    elif (new and not narrow and row_stream_min(config) and isinstance(R, int) and isinstance(M, int)
          and min(n for n, lay in zip(lengths, lays) if lay.n_red) >= row_stream_min(config)
          and M >= target.sm_count):  # many long rows: streamed (Config.row_stream_min)
        G, parts = stream_threads(make, config)
    elif new:
        G, parts = narrow or new_threads(make, config, few=isinstance(M, int) and M < target.sm_count)
    else:
        G = config.split_threads if split else 1024 if dynamic_row else old_threads(R)
        parts = make(G)
    if new and long_mixed and not all(p.cached for p in parts):  # measured with the rows in registers only:
        new, config = False, held_config  # rows streamed on the new schedule keep the old one (make reads both)
        G, parts = old_threads(R), make(old_threads(R))
    block = _block(G, M, R, columns, row_totals=not column_only)
    for p in parts:
        p.block = block
    paths, start = [], 0
    for aligned in (True, False) if new and any(p.aligned_check() for p in parts) else (True,):
        fields, start = [], 0
        for p in parts:
            p.aligned = aligned
            chunks = f" in {p.P} chunks of {p.CH}" if split else ""
            how = "registers" if p.cached else "streamed"
            if new:
                how += f", {p.V}-element vectors" + (f", {len(p.carry)} value(s) carried" if p.carry else "")
            body = p.body()
            how += f", {p.passes} pass{'es' if p.passes != 1 else ''} over the row"
            fields.append(dict(start=start, end=start + p.M * p.P, body=body,
                               what=f"{p.M} rows x {p.R}{chunks} ({how})"))
            start += p.M * p.P
        checks = [c for p in parts for c in p.aligned_check()]
        paths.append(dict(segments=fields, cond=" && ".join(dict.fromkeys(checks)) if aligned and checks else ""))
    fields = paths[0]["segments"]
    per_sm = config.column_threads if any(is_reduction(op) and op not in columns for op in group.ops) \
        or (new and G >= 32) else config.column_only_threads  # a wide row's partials: Config.column_threads
    cap = target.sm_count * max(1, per_sm // block) if columns else _MAX_GRID
    grid = min(-(-start // (block // G)), cap)
    if columns and isinstance(start, symbolic.SymInt) and symbolic.current() is not None:
        grid = cap  # a dynamic row count: every block writes its partial, so the fold reads as many at every size
    period = column_period(parts[0])[0] if columns else 1
    if period > 1 and grid * (block // G) < start:  # slots visit several rows: those must agree (Columns)
        step = period // math.gcd(period, block // G)
        grid = max(step, cap // step * step)
    cols = Columns(parts[0], outputs, grid, block) if columns else None
    idx_t, off_t = index_types(*(math.prod(v.shape) for v in inputs + outputs), start)
    params = group_params(inputs, outputs, scratch=cols is not None or split is not None)
    source = render_template(
        "fused_rows.cu.j2",
        header=group_header(group, inputs, ("new schedule: " if new else "") + "; ".join(f["what"] for f in fields)
                       + (f"; {len(columns)} column reduction(s) in {cols.P} partials" if cols else "")),
        **kernel_fields(group_dtypes(group), params),
        prelude=group_prelude(group),
        block=block,
        min_blocks=config.min_blocks,
        G=G,
        idx_t=idx_t,
        off_t=off_t,
        total_rows=start,
        paths=paths,
        new=new,
        slotted=parts[0].slots,
        row_unroll=config.row_unroll if cols is not None and not split else 1,
        slots=max([2] + [p.reductions for p in parts]),
        before=cols.declarations() if cols else [],
        after=cols.partial_writes() if cols else [],
    )
    stem = f"reduce_{_row_kernel_name(group, columns)}_rows_{outputs[0].dtype.name}"
    stem += f"_x{len(parts)}" if len(parts) > 1 else ""
    stem += "_split" if split else ""
    kernels = [finish(stem, source, grid, block, len(inputs), n_outputs=len(outputs))]
    if split:
        scratch = sum(-(-parts[0].M * parts[0].P * accumulator(op).dtype.itemsize // 256) * 256
                      for op in parts[0].partials)
        kernels.append(_split_fold(group, inputs, parts[0], stem, params))
        return [replace(k, scratch=scratch) for k in kernels]
    if cols:
        kernels.append(column_fold(group, inputs, cols, stem, params))
        kernels = [replace(k, scratch=cols.scratch) for k in kernels]
    return kernels
