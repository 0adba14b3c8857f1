"""Reductions over any axes (reduce_sum/mean/max/min, argmax) through templates/reduce.cu.j2.

The input's dims are split into kept and reduced groups (size-1 dims dropped, neighbours of one
class merged). M outputs, R reduced elements each. Two kernel shapes:
- rows: the innermost dim is reduced, so one output's elements are contiguous: a warp (R <= 1024)
  or a 256-thread block per output, warp shuffles then shared memory; when few outputs have very
  many elements, R is cut into P chunks whose M*P partials a `final` kernel folds (a warp per output);
- cols: the innermost dim is kept, so consecutive outputs are contiguous. A block takes a tile of
  L*V consecutive outputs: L lanes (the fewest powers of two covering M, at most 32) each load V
  of them at once (up to 16 bytes: the largest power of two dividing the innermost kept dim;
  argmax: 1), and the block's other 256/L thread rows split the reduced rows, each issuing 8 (16 if
  narrower than 16 bytes) loads before using any. So [262144, 128] bf16 runs 16 lanes x 16 rows,
  not 32 lanes half idle. Thread rows are folded by shuffles within a warp, then across the 8 warps
  through shared memory. R is cut into P chunks (whole batches per thread) for about 8 blocks per
  multiprocessor in all; the [P, M] partials are folded by a second column kernel with narrow
  tiles (2+ lanes) so it too spreads over many blocks.
Every fold runs in a fixed order (no atomics), so results do not vary between runs. f16/bf16
accumulate in f32; the output is rounded once (reduce_mean divides by R first).

The column schedule above retired an older one (tiles of 32 lanes x V outputs, 8 thread rows, chunks
for about 2048 blocks), measured with benchmarks/scripts/reduce_columns.py on an H100 on 2026-11-27:
faster or equal on every shape, with the same error vs NumPy (GPU tests of test_reduce_columns.py and
test_reduce_schedules.py: 93 passed). Median us, old -> new, reduced over axis 0 unless said:
    sum  [262144, 128] bf16             54.1 -> 35.2
    mean [262144, 128] bf16             55.1 -> 33.7
    sum  [32768, 4096] bf16            103.6 -> 98.3
    sum  [8192, 768] bf16               16.1 -> 15.3
    sum  [4096, 64] f32                 12.2 -> 12.2
    sum  [1000, 3] f32                  13.6 -> 8.0
    sum  [65536, 256] bf16              30.2 -> 23.6
    sum  [16384, 512] bf16              17.6 -> 16.6
    sum  [65536, 256] f32               40.8 -> 32.8
    sum  [64, 4096, 128] bf16 over 0,1  54.5 -> 33.8
    sum  [64, 4096, 128] bf16 over 1    34.9 -> 34.9
"""

from __future__ import annotations

from dataclasses import dataclass

from flame.codegen import cuda_c, views
from flame.codegen.kernel import (
    Kernel,
    finish,
    header,
    index_types,
    kernel_fields,
    op_params,
    render_template,
    shape_tag,
)
from flame.codegen.snippets import accumulator
from flame.ir import symbolic
from flame.ir.graph import Op
from flame.ir.registry import get
from flame.target import DEFAULT_TARGET

_BLOCK = 256
_TARGET_BLOCKS = 2048  # enough blocks to fill any current GPU a few times over
_MAX_GRID = 65535
_COL_BLOCKS = 8 * DEFAULT_TARGET.sm_count  # a column reduction's first kernel: a few waves, few partials
_COL_LOADS = 8  # loads each thread of a column reduction issues before using any (bytes in flight)
_FOLD_BLOCKS = 128  # blocks a fold of partials spreads over where its outputs allow


def _groups(shape: tuple[int, ...], axes: set[int]) -> tuple[list, list, bool]:
    """(kept [(size, stride)], reduced [(size, stride)], innermost-is-reduced) of a contiguous input."""
    strides = views.contiguous_strides(shape)
    dims: list[list] = []  # [size, stride, reduced?]
    for d, (s, st) in enumerate(zip(shape, strides)):
        if s == 1:
            continue
        red = d in axes
        if dims and dims[-1][2] == red:
            dims[-1][0] *= s
            dims[-1][1] = st
        else:
            dims.append([s, st, red])
    kept = [(s, st) for s, st, r in dims if not r]
    red = [(s, st) for s, st, r in dims if r]
    return kept, red, bool(dims) and dims[-1][2]


def _offset(groups: list, coord: str) -> str:
    terms = [f"{coord}{d} * {st}" if st != 1 else f"{coord}{d}" for d, (_, st) in enumerate(groups)]
    return " + ".join(terms) or "0"


def _chunks(R: int, units: int, min_chunk: int, target: int = _TARGET_BLOCKS) -> tuple[int, int]:
    """(P, CH): split R into P chunks of CH when `units` independent pieces would underfill the GPU
    (about `target` blocks)."""
    if units >= target // 2 or R < 4 * min_chunk:
        return 1, max(R, 1)
    p = max(1, min(-(-target // units), -(-R // min_chunk)))
    ch = -(-R // p)
    return -(-R // ch), ch


def _yields_index(op: Op) -> bool:
    """op's result is the position of the winner (argmax: the `reduction` trait's `index`), not a value."""
    return get(op.name).reduction.index


def _axes(op: Op) -> set[int]:
    rank = op.inputs[0].type.rank
    if _yields_index(op):
        return {op.attrs["axis"] % rank} if rank else set()
    return {a % max(rank, 1) for a in op.attrs["axes"]}


def _vector(op: Op, red: list, CH: int) -> int:
    """Elements per 16-byte load of a row reduction (1: none): one contiguous reduced dim with R and
    the chunk multiples of it."""
    if _yields_index(op):
        return 1
    V = max(1, 16 // op.inputs[0].dtype.itemsize)
    R = red[0][0] if len(red) == 1 else None
    if isinstance(R, symbolic.SymInt) and not all(type(c) is int and c % V == 0 for c in (R.a, R.b)):
        # a dynamic length (a batch mean) whose divisibility by V changes with the size: one kernel for
        # every size (a vector guard would render one per class of sizes, each an NVRTC compile)
        return 1
    ok = len(red) == 1 and red[0][1] == 1 and red[0][0] % V == 0 and CH % V == 0
    return V if ok else 1


def _rows(M: int, R: int, red: list, op: Op) -> tuple[int, int, int, int, int]:
    """A row reduction's (G threads per output, P chunks, CH elements per chunk, V elements per load,
    blocks)."""
    P, CH = _chunks(R, M, 4096)
    G = _BLOCK if P > 1 or R > 1024 else 32
    return G, P, CH, _vector(op, red, CH), -(-M * P // (_BLOCK // G))


def lower_reduction(op: Op) -> list[Kernel]:
    """One kernel (rows or cols), or two (partials into scratch, then a fold) for long reductions.
    Partials are folded in a fixed order, so results do not vary between runs."""
    x, out = op.inputs[0].type, op.out.type
    M = out.numel
    if M == 0:
        return []
    kept, red, inner = _groups(x.shape, _axes(op))
    if not inner:
        return lower_columns(op, kept, red)
    R = views.numel([s for s, _ in red])
    G, P, CH, V, blocks = _rows(M, R, red, op)
    common = _fields(op, "rows", kept, red, P, CH, G)
    stem = f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}_rows"
    what = f"rows reduction: {M} outputs x {R} elements" + (f" in {P} chunks of {CH}" if P > 1 else "")
    first = render_template("reduce.cu.j2", header=header(op, what), kind="rows", partial=P > 1, **{**common, "V": V})
    kernels = [finish(stem, first, min(blocks, _MAX_GRID), _BLOCK, 1, common["scratch"])]
    if P > 1:
        kernels.append(_fold_rows(op, common))
    return kernels


def _fields(op: Op, kind: str, kept: list, red: list, P: int, CH: int, G: int = 32) -> dict:
    """The template fields every reduction kernel shares (V: 1, no vector loads)."""
    x, out = op.inputs[0].type, op.out.type
    M, R = out.numel, views.numel([s for s, _ in red])
    accu = accumulator(op)
    acc = accu.dtype
    argmax = _yields_index(op)
    a, b = ("a", "b") if argmax else ("a.v", "b.v")
    vbytes = P * M * acc.itemsize
    index_offset = -(-vbytes // 8) * 8
    scratch = (index_offset + P * M * 8 if argmax else vbytes) if P > 1 else 0
    idx_t, off_t = index_types(x.numel)
    roff = "r" if len(red) == 1 and red[0][1] == 1 else _offset(red, "q")
    return dict(
        **kernel_fields({x.dtype, out.dtype}, op_params(op, scratch > 0)),
        block=_BLOCK,
        idx_t=idx_t,
        off_t=off_t,
        M=M,
        R=R,
        P=P,
        CH=CH,
        argmax=argmax,
        acc_t=acc.cuda_type,
        acc_size=acc.itemsize,
        identity=accu.identity,
        combine=accu.combine(a, b),
        index_offset=index_offset,
        scratch=scratch,
        store="a.i" if argmax else cuda_c.convert(accu.total("a.v", f"{R}u"), acc, out.dtype),
        kdims=[s for s, _ in kept],
        kexpr=_offset(kept, "k"),
        load=cuda_c.load(f"in0[base + {roff}]", x.dtype),
        rdims=[] if roff == "r" else [s for s, _ in red],
        G=G,
        V=1,
        src="in0",
        in_t=x.dtype.cuda_type,
        in_size=x.dtype.itemsize,
        roff=roff,
        vconv=cuda_c.load("w.v[v]", x.dtype),
        slot="o * P + p" if kind == "rows" else "p * M + o",
    )


def _fold_rows(op: Op, common: dict) -> Kernel:
    """The kernel folding a row reduction's P partials per output: a warp per output over its
    contiguous partials ([M, P])."""
    x = op.inputs[0].type
    M, P = common["M"], common["P"]
    what = f"final fold of {P} partials per output"
    source = render_template("reduce.cu.j2", header=header(op, what), kind="final", partial=False, **common)
    grid = min(-(-M // (_BLOCK // 32)), _MAX_GRID)
    return finish(f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}_final", source, grid, _BLOCK, 1, common["scratch"])


@dataclass(frozen=True)
class _Cols:
    """A column schedule: tiles of L lanes x V outputs (L a power of two <= 32), _BLOCK // L thread rows
    splitting each of P chunks of CH reduced rows, U loads in flight per thread."""

    L: int
    V: int
    U: int
    P: int
    CH: int
    tiles: int

    @property
    def fields(self) -> dict:
        return dict(L=self.L, V=self.V, U=self.U, P=self.P, CH=self.CH, T=self.L * self.V, Y=_BLOCK // self.L)


def _col_vector(width: int, itemsize: int, argmax: bool) -> int:
    """Elements per load: the most (up to 16 bytes, a power of two) that divide the innermost kept
    dim `width`, so every row's vectors stay aligned; argmax carries indices and loads one at a time."""
    v = 1 if argmax else max(1, 16 // itemsize)
    while width % v:
        v //= 2
    return v


def _lanes(M: int, V: int) -> int:
    """The fewest lanes (a power of two, at most a warp) whose V outputs each cover the M outputs:
    lanes beyond them would idle, so their threads split the reduced rows instead."""
    L = 1
    while L < 32 and L * V < M:
        L *= 2
    return L


def _col_plan(M: int, R: int, V: int, L: int, loads: int) -> _Cols:
    """Chunks of R so the first kernel has about _COL_BLOCKS blocks (its partials, P * M, stay small
    next to the input), each chunk whole batches of `loads` rows per thread (bar the last chunk)."""
    tiles = -(-M // (L * V))
    step = (_BLOCK // L) * loads
    P, CH = _chunks(R, tiles, step, _COL_BLOCKS)
    if P > 1:
        CH = -(-CH // step) * step
        P = -(-R // CH)
    return _Cols(L, V, loads, P, CH, tiles)


def _col_loads(V: int, itemsize: int, argmax: bool) -> int:
    """Loads per thread in flight: _COL_LOADS of 16 bytes, twice as many narrower ones (argmax's
    value-and-index pairs excepted: registers)."""
    return _COL_LOADS if argmax or V * itemsize >= 16 else 2 * _COL_LOADS


def _fold_lanes(M: int, V: int) -> int:
    """Lanes of a fold's tiles: narrow (at least 2: 32-byte sectors) so its few rows (the partials)
    still spread over _FOLD_BLOCKS blocks where there are outputs enough."""
    L = 2
    while L < 32 and -(-M // (2 * L * V)) >= _FOLD_BLOCKS:
        L *= 2
    return min(L, _lanes(M, V))


def lower_columns(op: Op, kept: list, red: list) -> list[Kernel]:
    """A reduction whose innermost dim is kept (module docstring): one kernel, or partials of P chunks
    into scratch ([P, M]) and a second column reduction folding them."""
    x = op.inputs[0].type
    M, R = op.out.type.numel, views.numel([s for s, _ in red])
    argmax = _yields_index(op)
    V = _col_vector(kept[-1][0] if kept else 1, x.dtype.itemsize, argmax)  # no kept dim: one output
    plan = _col_plan(M, R, V, _lanes(M, V), _col_loads(V, x.dtype.itemsize, argmax))
    common = _fields(op, "cols", kept, red, plan.P, plan.CH)
    cols = {
        **common,
        **plan.fields,
        "sload": cuda_c.load("in0[at[j]]", x.dtype),
        "vconv": cuda_c.load("w[j].v[v]", x.dtype),
        "index": f"(long long)(r + j * {_BLOCK // plan.L}u)",
    }
    what = f"cols reduction: {M} outputs x {R} elements" + (f" in {plan.P} chunks of {plan.CH}" if plan.P > 1 else "")
    first = render_template("reduce.cu.j2", header=header(op, what), kind="cols", partial=plan.P > 1, **cols)
    stem = f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}"
    scratch = common["scratch"]
    kernels = [finish(f"{stem}_cols", first, min(plan.tiles * plan.P, _MAX_GRID), _BLOCK, 1, scratch)]
    if plan.P > 1:
        kernels.append(_fold_columns(op, common, plan.P, f"{stem}_final"))
    return kernels


def _fold_columns(op: Op, common: dict, P: int, stem: str) -> Kernel:
    """The column reduction of the [P, M] partials (values, then argmax's indices) in scratch."""
    M, acc_t, argmax = common["M"], common["acc_t"], common["argmax"]
    V = _col_vector(M, common["acc_size"], argmax)
    L = _fold_lanes(M, V)
    plan = _Cols(L, V, _col_loads(V, common["acc_size"], argmax), 1, P, -(-M // (L * V)))
    src = f"reinterpret_cast<const {acc_t}*>(scratch)"
    index = f"reinterpret_cast<const long long*>(reinterpret_cast<const char*>(scratch) + {common['index_offset']})"
    fields = {
        **common,
        **plan.fields,
        "R": P,
        "kdims": [M],
        "kexpr": "k0",
        "rdims": [P],
        "roff": f"q0 * {M}",
        "src": src,
        "in_t": acc_t,
        "in_size": common["acc_size"],
        "sload": f"{src}[at[j]]",
        "vconv": "w[j].v[v]",
        "index": f"{index}[at[j]]",
    }
    what = f"final fold of {P} partials per output"
    source = render_template("reduce.cu.j2", header=header(op, what), kind="cols", partial=False, **fields)
    return finish(stem, source, min(plan.tiles, _MAX_GRID), _BLOCK, 1, common["scratch"])
