"""Reductions over any axes (reduce_sum/mean/max/min, argmax) through templates/reduce.cu.j2.

The input's dims are split into kept and reduced groups (size-1 dims dropped, neighbours of one
class merged). M outputs, R reduced elements each. Three kernel shapes:
- rows: the innermost dim is reduced, so one output's elements are contiguous: a warp (R <= 1024)
  or a 256-thread block per output, warp shuffles then shared memory;
- cols: the innermost dim is kept: 32 consecutive outputs per block (coalesced), 8 thread rows
  split R, folded through shared memory;
- when few outputs have very many elements, R is cut into P chunks: the first kernel writes M*P
  partials to scratch, a `final` kernel folds them (one warp per output).
f16/bf16 accumulate in f32; the output is rounded once."""

from __future__ import annotations

from flame.codegen import cuda_c, views
from flame.codegen.kernel import Kernel, finish, header, index_types, op_params, render_template, shape_tag
from flame.codegen.snippets import accumulator
from flame.ir.graph import Op

_BLOCK = 256
_TARGET_BLOCKS = 2048  # enough blocks to fill any current GPU a few times over
_MAX_GRID = 65535


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


def _chunks(R: int, units: int, min_chunk: int) -> tuple[int, int]:
    """(P, CH): split R into P chunks of CH when `units` independent pieces would underfill the GPU."""
    if units >= _TARGET_BLOCKS // 2 or R < 4 * min_chunk:
        return 1, max(R, 1)
    p = max(1, min(-(-_TARGET_BLOCKS // units), -(-R // min_chunk)))
    ch = -(-R // p)
    return -(-R // ch), ch


def _axes(op: Op) -> set[int]:
    rank = op.inputs[0].type.rank
    if op.name == "argmax":
        return {op.attrs["axis"] % rank} if rank else set()
    return {a % max(rank, 1) for a in op.attrs["axes"]}


def _vector(op: Op, kept: list, red: list, inner: bool, CH: int) -> int:
    """Elements per 16-byte load (1: none): rows need one contiguous reduced dim with R and the chunk
    multiples of it; columns need the innermost kept dim contiguous and a multiple of it."""
    if op.name == "argmax":
        return 1
    V = max(1, 16 // op.inputs[0].dtype.itemsize)
    if inner:
        ok = len(red) == 1 and red[0][1] == 1 and red[0][0] % V == 0 and CH % V == 0
    else:
        ok = bool(kept) and kept[-1][1] == 1 and kept[-1][0] % V == 0
    return V if ok else 1


def _schedule(M: int, R: int, kept: list, red: list, inner: bool, op: Op) -> tuple[str, int, int, int, int, int]:
    """(kind, G threads per output, P chunks, CH elements per chunk, V elements per load, blocks)."""
    if inner:
        P, CH = _chunks(R, M, 4096)
        G = _BLOCK if P > 1 or R > 1024 else 32
        V = _vector(op, kept, red, inner, CH)
        return "rows", G, P, CH, V, -(-M * P // (_BLOCK // G))
    V = _vector(op, kept, red, inner, 0)
    tiles = -(-M // (32 * V))
    P, CH = _chunks(R, tiles, 64)
    return "cols", 32, P, CH, V, tiles * P


def lower_reduction(op: Op) -> list[Kernel]:
    """One kernel (rows or cols), or two (partials into scratch, then a fold) for long reductions.
    Partials are folded in a fixed order, so results do not vary between runs."""
    x, out = op.inputs[0].type, op.out.type
    M = out.numel
    if M == 0:
        return []
    kept, red, inner = _groups(x.shape, _axes(op))
    R = views.numel([s for s, _ in red])
    accu = accumulator(op)
    acc = accu.dtype
    argmax = op.name == "argmax"
    kind, G, P, CH, V, units = _schedule(M, R, kept, red, inner, op)
    a, b = ("a", "b") if argmax else ("a.v", "b.v")
    total = accu.total("a.v", f"{R}u")
    vbytes = P * M * acc.itemsize
    index_offset = -(-vbytes // 8) * 8
    scratch = (index_offset + P * M * 8 if argmax else vbytes) if P > 1 else 0
    idx_t, off_t = index_types(x.numel)
    roff = "r" if len(red) == 1 and red[0][1] == 1 else _offset(red, "q")
    common = dict(
        includes=cuda_c.includes({x.dtype, out.dtype}),
        name="FLAME_KERNEL_NAME",
        params=op_params(op, scratch > 0),
        block=_BLOCK,
        idx_t=idx_t,
        off_t=off_t,
        M=M,
        R=R,
        P=P,
        CH=CH,
        argmax=argmax,
        acc_t=acc.cuda_type,
        identity=accu.identity,
        combine=accu.combine(a, b),
        index_offset=index_offset,
        store="a.i" if argmax else cuda_c.convert(total, acc, out.dtype),
        kdims=[s for s, _ in kept],
        kexpr=_offset(kept, "k"),
        load=cuda_c.load(f"in0[base + {roff}]", x.dtype),
        rdims=[] if roff == "r" else [s for s, _ in red],
        G=G,
        V=1,
        in_t=x.dtype.cuda_type,
        in_size=x.dtype.itemsize,
        roff=roff,
        vconv=cuda_c.load("w.v[v]", x.dtype),
        slot="o * P + p" if kind == "rows" else "p * M + o",
    )
    stem = f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}_{kind}"
    what = f"{kind} reduction: {M} outputs x {R} elements" + (f" in {P} chunks of {CH}" if P > 1 else "")
    first = render_template("reduce.cu.j2", header=header(op, what), kind=kind, partial=P > 1, **{**common, "V": V})
    kernels = [finish(stem, first, min(units, _MAX_GRID), _BLOCK, 1, scratch)]
    if P > 1:
        kernels.append(_fold(op, kind, common, scratch))
    return kernels


def _fold(op: Op, kind: str, common: dict, scratch: int) -> Kernel:
    """The kernel folding P partials per output: a warp per output over its contiguous partials
    ([M, P], rows), or a column reduction of the [P, M] partials (cols: coalesced over outputs)."""
    x = op.inputs[0].type
    M, P = common["M"], common["P"]
    what = f"final fold of {P} partials per output"
    if kind == "rows":
        source = render_template("reduce.cu.j2", header=header(op, what), kind="final", partial=False, **common)
        grid = min(-(-M // (_BLOCK // 32)), _MAX_GRID)
    else:
        acc_t = common["acc_t"]
        fields = {**common, "R": P, "P": 1, "CH": P, "kdims": [M], "kexpr": "k0", "rdims": [P],
                  "load": f"reinterpret_cast<const {acc_t}*>(scratch)[base + q0 * {M}]"}
        source = render_template("reduce.cu.j2", header=header(op, what), kind="cols", partial=False, **fields)
        grid = min(-(-M // 32), _MAX_GRID)
    return finish(f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}_final", source, grid, _BLOCK, 1, scratch)
