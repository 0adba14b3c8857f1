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
of a tile would be idle and the elementwise read is already nearly coalesced) take the copy path.

A fused elementwise group that computes pointwise values of one tensor (and 0-d scalars) and writes
them only transposed (FP8 training's cast of an activation, read transposed by a backward GEMM:
`scaled_cast` then `permute`) is the same tiled kernel with the pointwise ops applied as the tile is
filled (`lower_tiled_map`): the wide source is read coalesced in its own order and the narrow result
written coalesced in its own, rather than one element at a large stride per thread (12-16 % of copy
bandwidth for such FP8 casts on an H100, benchmarks/results/2026-12-05-H100-fp8/). A group that also
writes some of those values in their own layout (a cast that one FP8 GEMM reads as it is and another
transposed: passes/fuse_transposes.py) is the same kernel storing them as the tile is read, in vectors of
the read's width: the source is read once for both, instead of a cast kernel and a transpose of its
result. Config.tiled_maps off (or FLAME_TILED_MAP=0) lowers such groups as index-mapping elementwise
kernels instead (codegen/fused.lower_map).

A tile of 1-byte results filled and emptied a byte per shared-memory access (16 of each per 16-byte
vector) ran the FP8 GEMM operands' casts at 70-78 % of copy on an H100. Where the source has 1 or 2
bytes an element and the extents take 4-element reads and 16-byte writes, each thread instead reads a
4 x 4 block, packs its columns into words (the four bytes of a result row) and the tile is emptied 16
bytes at a time (Config.byte_words, transpose.cu.j2's `packed`): the bf16 [4096, 11008] cast writing both
layouts 81.6 -> 74.0 us (95 % of copy); from f32 sources the byte tile stays, which was faster there
(40.4 against 44.2 us). Config.wide_byte_tiles (or FLAME_WIDE_BYTE_TILES=1) makes byte tiles 128 x 128
(16 KiB) where both extents reach 128; it is off, measured slower (48-67 % of copy)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from flame.codegen import cuda_c, views
from flame.codegen.elementwise import op_expr, render_map
from flame.codegen.fused import group_inputs
from flame.codegen.kernel import (
    DEFAULT_CONFIG,
    MAX_GRID,
    Config,
    Kernel,
    byte_words,
    finish,
    group_dtypes,
    group_header,
    group_params,
    group_prelude,
    header,
    index_types,
    kernel_fields,
    op_params,
    render_template,
    shape_tag,
    tiled_maps,
    wide_byte_tiles,
)
from flame.ir import symbolic
from flame.ir.graph import FusionGroup, Kind, Op, Value
from flame.ir.indexmap import permute_map
from flame.ir.registry import get, is_fill

BLOCK = 256
MIN_EXTENT = 8
VEC_BYTES = 16
BANKS, BANK_BYTES = 32, 4
WIDE_TILE = 128  # a 1-byte tile's side with FLAME_WIDE_BYTE_TILES=1 (the module docstring)


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


def lower_permute(op: Op, config: Config = DEFAULT_CONFIG) -> list[Kernel]:
    """A permute: a tiled shared-memory transpose when the innermost dim moves, else a vectorised copy of
    contiguous runs (see the module docstring); `config` says whether 1-byte tiles are wide."""
    view = views.of_map(permute_map(op), op.inputs[0].shape)
    t = as_transpose(op.out.shape, view) if op.out.type.numel and _static(op) else None
    if t is None or min(t.ni, t.nj) < MIN_EXTENT:
        return render_map(op, [view], "a0", op.out.dtype, what="index-mapping copy", raw=True)
    return [_render_tiled(op, t, wide_byte_tiles(config), byte_words(config))]


def _tile_fields(
    t: Transpose, load_size: int, size: int, src: str, out: str, wide: bool = False, direct: tuple = (),
    words: bool = False,
) -> dict:
    """The template fields of a tiled transpose reading `src` (elements of load_size bytes) and writing
    `out` (of size bytes, the tile's), and `direct` ((pointer, element bytes) each) in src's layout as
    it is read: tile shape (wide: WIDE_TILE for 1-byte elements), vector widths, padding, tile count,
    alignment test, and whether the vector path packs 1-byte results into words (`words`, Config.byte_words:
    sources of 1 or 2 bytes, 64 x 64 tiles, reads of at least 4 elements and writes of 16, so 4 x 4 blocks
    never straddle an edge)."""
    tile = 64 if min(t.ni, t.nj) >= 64 else 32
    if size == 1 and wide and min(t.ni, t.nj) >= WIDE_TILE:
        tile = WIDE_TILE
    vr = min(_pow2_divisor(t.ni, VEC_BYTES // load_size), tile)
    vw = min(_pow2_divisor(t.nj, VEC_BYTES // size), tile)
    ti, tj = -(-t.ni // tile), -(-t.nj // tile)
    aligned = " && ".join(
        f"reinterpret_cast<unsigned long long>({p}) % {n} == 0"
        for p, n in [(src, vr * load_size), (out, vw * size), *((p, vr * s) for p, s in direct)]
    )
    return dict(
        t=t,
        tile=tile,
        pad=_padding(tile, size, vr, vw),
        tiles=math.prod(e for e, _, _ in t.batch) * ti * tj,
        ti=ti,
        tj=tj,
        widths=[(vr, vw)] + ([(1, 1)] if (vr, vw) != (1, 1) else []),
        aligned=aligned,
        words=words and size == 1 and load_size <= 2 and tile == 64 and vr >= 4 and vw == 16,
    )


def _render_tiled(op: Op, t: Transpose, wide: bool, words: bool) -> Kernel:
    size = op.out.dtype.itemsize
    f = _tile_fields(t, size, size, "in0", "out", wide, words=words)
    tiles, tile = f["tiles"], f["tile"]
    idx_t, off_t = index_types(op.out.type.numel, tiles)
    source = render_template(
        "transpose.cu.j2",
        header=header(
            op,
            f"tiled transpose through shared memory: {t.nj} x {t.ni} per batch of "
            f"{tiles // (f['ti'] * f['tj'])}, {tile} x {tile} tiles",
        ),
        **kernel_fields({op.out.dtype}, op_params(op)),
        block=BLOCK,
        idx_t=idx_t,
        off_t=off_t,
        stype=op.out.dtype.cuda_type,
        **f,
    )
    stem = f"{op.name}_{op.out.dtype.name}_{shape_tag(op.out.shape)}_tiled"
    return finish(stem, source, min(tiles, MAX_GRID), BLOCK, 1)


def _pointwise_source(group: FusionGroup) -> tuple[Op, Value, list[Op]] | None:
    """(the permute, the one tensor the group reads, the pointwise ops it computes besides the permute)
    when `group` computes pointwise values of one tensor and 0-d scalars and writes their permute and
    maybe some of them in their own layout (values of the tensor's shape); else None."""
    perms = [op for op in group.ops if get(op.name).view is not None and get(op.name).view.perm is not None]
    if len(perms) != 1 or perms[0].out not in group.outputs:
        return None
    (perm,) = perms
    body = [op for op in group.ops if op is not perm]
    shape = perm.inputs[0].shape
    inside = {op.out for op in body}
    if not body or perm.inputs[0] not in inside or any(perm.out in op.inputs for op in body):
        return None
    if any(v is not perm.out and (v not in inside or v.shape != shape) for v in group.outputs):
        return None
    sources = set()
    for op in body:
        opdef = get(op.name)
        if (
            opdef.category != "elementwise"
            or opdef.view is not None
            or opdef.positional
            or op.out.shape not in ((), shape)
        ):
            return None
        for v in op.inputs:
            if v not in inside and v.shape != ():
                sources.add(v)
            if v.shape not in ((), shape):
                return None
    return (perm, sources.pop(), body) if len(sources) == 1 else None


def _pointwise_code(inputs: list[Value], source: Value,
                    body: list[Op]) -> tuple[list[str], list[str], dict, dict]:
    """The statements of a tiled map: each scalar input read once (s<k>), then per element `x` of the
    source the body's ops, each value rounded to its dtype (t<n>); the C name of every value; and
    of the values of a narrower storage type than they compute in (f16, bf16, FP8), the name of the
    stored form their rounding made, which their stores write as it is (cuda_c.bind_rounded)."""
    names = {source: "x"}
    scalars = []
    for k, v in enumerate(inputs):
        if v is not source:
            names[v] = f"s{k}"
            ctype = cuda_c.compute_dtype(v.dtype).cuda_type
            scalars.append(f"const {ctype} s{k} = {cuda_c.load(f'in{k}[0]', v.dtype)};")
    lines, raw = [], {}
    for n, op in enumerate(body):
        expr, expr_dtype = op_expr(op, [names[u] for u in op.inputs])
        names[op.out] = f"t{n}"
        decls, kept = cuda_c.bind_rounded(f"t{n}", expr, expr_dtype, op.out.dtype)
        lines += decls
        if kept is not None:
            raw[op.out] = kept
    return scalars, lines, names, raw


def lower_tiled_map(group: FusionGroup, config: Config = DEFAULT_CONFIG) -> list[Kernel] | None:
    """The tiled transpose of a fused elementwise group that writes pointwise values of one tensor
    transposed, and maybe some of them in their own layout too (the module docstring), the pointwise ops
    computed as each element enters the tile as the elementwise kernel computes them (every
    intermediate rounded to its dtype), the direct outputs stored as the tile is read; None for any
    other group."""
    found = _pointwise_source(group) if group.kind == Kind.ELEMENTWISE and tiled_maps(config) else None
    if found is None:
        return None
    perm, source, body = found
    view = views.of_map(permute_map(perm), perm.inputs[0].shape)
    t = as_transpose(perm.out.shape, view) if perm.out.type.numel and _static(perm) else None
    if t is None or min(t.ni, t.nj) < MIN_EXTENT:
        return None
    inputs, outputs = group_inputs(group), list(group.outputs)
    scalars, lines, names, raw = _pointwise_code(inputs, source, body)

    def stored(v: Value, dtype) -> str:  # v's value as storage type `dtype`
        return raw[v] if v in raw and v.dtype == dtype else cuda_c.convert(names[v], v.dtype, dtype)

    out, tname = perm.out.dtype, f"out{outputs.index(perm.out)}"
    direct = [(f"out{k}", v) for k, v in enumerate(outputs) if v is not perm.out]
    src = f"in{inputs.index(source)}"
    f = _tile_fields(
        t,
        source.dtype.itemsize,
        out.itemsize,
        src,
        tname,
        wide_byte_tiles(config),
        tuple((p, v.dtype.itemsize) for p, v in direct),
        byte_words(config),
    )
    idx_t, off_t = index_types(perm.out.type.numel, f["tiles"])
    also = f" and {len(direct)} in its own layout" if direct else ""
    source_text = render_template(
        "transpose.cu.j2",
        header=group_header(
            group,
            inputs,
            f"tiled transpose through shared memory of pointwise values of %"
            f"{inputs.index(source)}{also}: {t.nj} x {t.ni}, {f['tile']} x {f['tile']} tiles",
        ),
        **kernel_fields(group_dtypes(group), group_params(inputs, outputs)),
        prelude=group_prelude(group),
        block=BLOCK,
        idx_t=idx_t,
        off_t=off_t,
        stype=out.cuda_type,
        ltype=source.dtype.cuda_type,
        src_ptr=src,
        out=tname,
        scalars=scalars,
        xtype=cuda_c.compute_dtype(source.dtype).cuda_type,
        xload=cuda_c.load("a[k].v[e]", source.dtype),
        body=lines,
        result=stored(perm.inputs[0], out),
        direct=[dict(ptr=p, ctype=v.dtype.cuda_type, value=stored(v, v.dtype)) for p, v in direct],
        **f,
    )
    ops = [op.name for op in body if not is_fill(op)]
    what = f"{shape_tag(perm.inputs[0].shape)}_and_transposed" if direct else shape_tag(perm.out.shape)
    stem = "fused_" + "_".join(list(dict.fromkeys(ops))[:4]) + f"_{out.name}_{what}_tiled"
    k = finish(stem, source_text, min(f["tiles"], MAX_GRID), BLOCK, len(inputs), n_outputs=len(outputs))
    return [dataclasses.replace(k, in_place_safe=False)]
