"""permute as a copy kernel. After `views.collapse` a permute is one of two things:

- the output's innermost dim is also the input's (e.g. [B, S, H, D] -> [B, H, S, D]): every output
  row is a contiguous run of the input, copied by the index-mapping copy (elementwise.render_map)
  with 16-byte vector loads and stores where the run length allows;
- the innermost dim moves: a batch of 2-D transposes. Output dim I is the one the input walks
  contiguously, output dim J (the last) the one the output walks contiguously; a block copies a
  tile of TJ x TI elements through shared memory (templates/transpose.cu.j2), reading rows of I and
  writing rows of J, both coalesced and as wide vectors as the extents allow. Reading in the
  output's order instead touches one element per 32-byte sector: 31 % of copy bandwidth for the
  NCHW <-> NHWC conversions of a ResNet step (benchmarks/results/2026-11-27-H100-transpose/, its profile).

Dynamic sizes (flame.ir.symbolic) and thin transposes (I or J under MIN_EXTENT elements, where most
of a tile would be idle and the elementwise read is already nearly coalesced) take the copy path."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flame.codegen import views
from flame.codegen.elementwise import render_map
from flame.codegen.kernel import (
    MAX_GRID,
    Kernel,
    finish,
    header,
    index_types,
    kernel_fields,
    op_params,
    render_template,
    shape_tag,
)
from flame.ir import symbolic
from flame.ir.graph import Op
from flame.ir.indexmap import permute_map

BLOCK = 256
MIN_EXTENT = 8
VEC_BYTES = 16
BANKS, BANK_BYTES = 32, 4


@dataclass(frozen=True)
class Transpose:
    """A collapsed permute whose innermost dim moves: out[b, i, j] = in[b, i, j] with
    in offset = sum_b c_b * in_b + i + j * in_j, out offset = sum_b c_b * out_b + i * out_i + j."""

    batch: tuple[tuple[int, int, int], ...]  # (extent, input stride, output stride) per batch dim
    ni: int
    out_i: int
    nj: int
    in_j: int


def as_transpose(shape: tuple[int, ...], view: views.View) -> Transpose | None:
    """The batched 2-D transpose that a permute's collapsed view is, or None when the output's innermost
    dim is the input's (or the tensor is a single run)."""
    dims, (cv,) = views.collapse(shape, [view])
    if len(dims) < 2 or cv.strides[-1] == 1:
        return None
    p = cv.strides.index(1)
    out_strides = views.contiguous_strides(dims)
    batch = tuple((dims[d], cv.strides[d], out_strides[d]) for d in range(len(dims) - 1) if d != p)
    return Transpose(batch, dims[p], out_strides[p], dims[-1], cv.strides[-1])


def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two <= cap dividing n."""
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


def _bank_cost(addresses: list[list[int]], size: int) -> int:
    """Shared-memory wavefronts of warp accesses: per access, the most distinct 4-byte words any one bank
    serves (`size`-byte elements at byte addresses)."""
    cost = 0
    for access in addresses:
        words: dict[int, set[int]] = {}
        for a in access:
            for w in range(a // BANK_BYTES, (a + size - 1) // BANK_BYTES + 1):
                words.setdefault(w % BANKS, set()).add(w)
        cost += max(len(s) for s in words.values())
    return cost


def _padding(tile: int, size: int, vr: int, vw: int) -> int:
    """Elements of padding per shared-memory row (tile[j][0..tile+pad)) with the fewest bank conflicts
    over one warp's stores of the read phase and loads of the write phase (then the least padding)."""

    def cost(pad: int) -> int:
        row = tile + pad
        tr, tw = tile // vr, tile // vw
        stores = [[((t // tr) * row + (t % tr) * vr + e) * size for t in range(32)] for e in range(vr)]
        loads = [[((t % tw) * vw + e) * row * size + (t // tw) * size for t in range(32)] for e in range(vw)]
        return _bank_cost(stores, size) + _bank_cost(loads, size)

    return min(range(0, 2 * VEC_BYTES // size + 1), key=lambda pad: (cost(pad), pad))


def _static(op: Op) -> bool:
    return not any(isinstance(d, symbolic.SymInt) for d in (*op.inputs[0].shape, *op.out.shape))


def lower_permute(op: Op) -> list[Kernel]:
    """A permute: a tiled shared-memory transpose when the innermost dim moves, else a vectorised copy of
    contiguous runs (see the module docstring)."""
    view = views.of_map(permute_map(op), op.inputs[0].shape)
    t = as_transpose(op.out.shape, view) if op.out.type.numel and _static(op) else None
    if t is None or min(t.ni, t.nj) < MIN_EXTENT:
        return render_map(op, [view], "a0", op.out.dtype, what="index-mapping copy", raw=True)
    return [_render_tiled(op, t)]


def _render_tiled(op: Op, t: Transpose) -> Kernel:
    size = op.out.dtype.itemsize
    tile = 64 if min(t.ni, t.nj) >= 64 else 32
    vr = min(_pow2_divisor(t.ni, VEC_BYTES // size), tile)
    vw = min(_pow2_divisor(t.nj, VEC_BYTES // size), tile)
    ti, tj = -(-t.ni // tile), -(-t.nj // tile)
    tiles = math.prod(e for e, _, _ in t.batch) * ti * tj
    n = op.out.type.numel
    idx_t, off_t = index_types(n, tiles)
    stype = op.out.dtype.cuda_type
    aligned = (
        f"reinterpret_cast<unsigned long long>(in0) % {vr * size} == 0 && "
        f"reinterpret_cast<unsigned long long>(out) % {vw * size} == 0"
    )
    source = render_template(
        "transpose.cu.j2",
        header=header(
            op,
            f"tiled transpose through shared memory: {t.nj} x {t.ni} per batch of "
            f"{tiles // (ti * tj)}, {tile} x {tile} tiles",
        ),
        **kernel_fields({op.out.dtype}, op_params(op)),
        block=BLOCK,
        idx_t=idx_t,
        off_t=off_t,
        stype=stype,
        t=t,
        tile=tile,
        pad=_padding(tile, size, vr, vw),
        tiles=tiles,
        ti=ti,
        tj=tj,
        widths=[(vr, vw)] + ([(1, 1)] if (vr, vw) != (1, 1) else []),
        aligned=aligned,
    )
    stem = f"{op.name}_{op.out.dtype.name}_{shape_tag(op.out.shape)}_tiled"
    return finish(stem, source, min(tiles, MAX_GRID), BLOCK, 1)
