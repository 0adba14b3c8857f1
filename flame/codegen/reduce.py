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


def lower_reduction(op: Op) -> list[Kernel]:
    """One kernel (rows or cols), or two (partials into scratch, then final) for long reductions."""
    x, out = op.inputs[0].type, op.out.type
    M = out.numel
    if M == 0:
        return []
    kept, red, inner = _groups(x.shape, _axes(op))
    R = views.numel([s for s, _ in red])
    accu = accumulator(op)
    acc = accu.dtype
    argmax = op.name == "argmax"
    if inner:
        G = 32 if R <= 1024 else _BLOCK
        P, CH = _chunks(R, M, 4096)
        if P > 1:
            G = _BLOCK
        kind, units = "rows", -(-M * P // (_BLOCK // G))
    else:
        tiles = -(-M // 32)
        P, CH = _chunks(R, tiles, 256)
        kind, units = "cols", tiles * P
    a, b = ("a", "b") if argmax else ("a.v", "b.v")
    total = accu.total("a.v", f"{R}u")
    vbytes = P * M * acc.itemsize
    index_offset = -(-vbytes // 8) * 8
    scratch = (index_offset + P * M * 8 if argmax else vbytes) if P > 1 else 0
    idx_t, off_t = index_types(x.numel)
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
        load=cuda_c.load("in0[base + @]", x.dtype),
        rdims=[s for s, _ in red],
        G=32,
    )
    if len(red) == 1 and red[0][1] == 1:
        common["rdims"] = []  # one contiguous reduced dim: its offset is r itself
        common["load"] = common["load"].replace("@", "r")
    else:
        common["load"] = common["load"].replace("@", _offset(red, "q"))
    stem = f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}_{kind}"
    what = f"{kind} reduction: {M} outputs x {R} elements" + (f" in {P} chunks of {CH}" if P > 1 else "")
    first = render_template(
        "reduce.cu.j2", header=header(op, what), kind=kind, partial=P > 1, **{**common, "G": G if inner else 32}
    )
    kernels = [finish(stem, first, min(units, _MAX_GRID), _BLOCK, 1, scratch)]
    if P > 1:
        final = render_template(
            "reduce.cu.j2",
            header=header(op, f"final fold of {P} partials per output"),
            kind="final",
            partial=False,
            **common,
        )
        kernels.append(
            finish(
                f"{op.name}_{x.dtype.name}_{shape_tag(x.shape)}_final",
                final,
                min(-(-M // (_BLOCK // 32)), _MAX_GRID),
                _BLOCK,
                1,
                scratch,
            )
        )
    return kernels
