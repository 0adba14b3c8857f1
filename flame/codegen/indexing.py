"""Copy kernels that are not affine Views: pad, concat, gather, index_select, scatter_add (copy x
into the output, then atomicAdd src; f16/bf16 accumulate in an f32 scratch copy and round once at
the end, as the reference does) and scatter (copy x, claim each position for its last write with
atomicMax on the write's number, then the winners store), segment_sum (zero the sums, add src's
slices atomically at their 1-D index, 4 elements per access, f16/bf16 in an f32 scratch rounded once
at the end). An index outside [0, size) fails a device-side assertion. All through
templates/indexed.cu.j2."""

from __future__ import annotations

import math
from dataclasses import replace

from flame.codegen import cuda_c, views
from flame.codegen.kernel import Kernel, grid_for, render_op
from flame.ir import symbolic
from flame.ir.dtypes import bf16, f16, f32, i64
from flame.ir.graph import Op


def _render(op: Op, kind: str, n: int, what: str, scratch: int = 0, **fields) -> Kernel:
    return render_op("indexed.cu.j2", op, kind, n, what, scratch, **{"vec": None, "win_t": None, "op_name": op.name,
                                                                      **fields})


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """(extent along axis, product of the trailing dims)."""
    return shape[axis], math.prod(shape[axis + 1 :])


def lower_pad(op: Op) -> list[Kernel]:
    n = op.out.type.numel
    if n == 0:
        return []
    x = op.inputs[0].type
    value = cuda_c.convert(cuda_c.literal(op.attrs["value"], x.dtype), x.dtype, x.dtype)
    return [
        _render(
            op,
            "pad",
            n,
            "constant padding",
            dims=list(op.out.shape),
            lo=[lo for lo, _ in op.attrs["pads"]],
            sizes=list(x.shape),
            strides=list(views.contiguous_strides(x.shape)),
            value=value,
        )
    ]


def lower_concat(op: Op) -> list[Kernel]:
    n = op.out.type.numel
    if n == 0:
        return []
    axis = op.attrs["axis"] % op.out.type.rank
    extent, inner = _split(op.out.shape, axis)
    parts, at = [], 0
    for k, v in enumerate(op.inputs):
        size = v.shape[axis]
        if size:
            parts.append({"k": k, "start": at, "stop": at + size, "size": size})
        at += size
    return [_render(op, "concat", n, f"concat along axis {axis}", parts=parts, inner=inner, extent=extent)]


def lower_gather(op: Op) -> list[Kernel]:
    """gather (take along axis) and index_select: out[.., c, ..] = x[.., idx[..], ..]."""
    n = op.out.type.numel
    if n == 0:
        return []
    axis = op.attrs["axis"] % op.inputs[0].type.rank
    extent, inner = _split(op.out.shape, axis)
    return [
        _render(
            op, op.name, n, f"indexed along axis {axis}", inner=inner, extent=extent, axis_size=op.inputs[0].shape[axis]
        )
    ]


def _atomic_add(target: str, at: str, value: str, dtype) -> str:
    if dtype == i64:  # two's complement: the unsigned 64-bit add wraps like a signed one
        return f"atomicAdd(reinterpret_cast<unsigned long long*>({target}) + {at}, (unsigned long long){value})"
    return f"atomicAdd({target} + {at}, {value})"


def _vec(src: str | None, src_dtype, dst: str, dst_dtype, value: str) -> dict:
    """A copy phase of scatter_add moved 4 elements per access: value converts element `a.v[e]`
    (src None: a fill, value reads nothing)."""
    return dict(n=4, src=src, src_t=src_dtype.cuda_type, src_align=4 * src_dtype.itemsize, dst=dst,
                dst_t=dst_dtype.cuda_type, dst_align=4 * dst_dtype.itemsize, value=value)


def lower_scatter_add(op: Op) -> list[Kernel]:
    """out = x; out[.., idx[i], ..] += src[i] (duplicates add up; order is not deterministic). The copy
    and rounding phases move 4 elements per access when their buffers are aligned."""
    out = op.out.type
    if out.numel == 0:
        return []
    x, idx, src = (v.type for v in op.inputs)
    low = out.dtype in (f16, bf16)
    axis = op.attrs["axis"] % out.rank
    scratch = out.numel * 4 if low else 0
    target = "reinterpret_cast<float*>(scratch)" if low else "out"
    copy = cuda_c.load("in0[i]", x.dtype) if low else "in0[i]"
    extent, inner = _split(idx.shape, axis)
    fields = dict(inner=inner, extent=extent, axis_size=out.shape[axis], target=target)
    acc = f32 if low else out.dtype
    vec = _vec("in0", x.dtype, target, acc, cuda_c.load("a.v[e]", x.dtype) if low else "a.v[e]")
    kernels = [_render(op, "scatter_copy", out.numel, "scatter_add 1/2: copy x", scratch, copy=copy, vec=vec,
                       **fields)]
    if src.numel:
        value = cuda_c.load("in2[i]", src.dtype)
        atomic = _atomic_add(target, "at", value, f32 if low else out.dtype)
        adds = _render(op, "scatter_add", src.numel, "scatter_add 2/2: atomically add src", scratch, atomic=atomic,
                       **fields)
        # integer sums are exact whatever the order; floating-point ones change with it
        kernels.append(replace(adds, deterministic=not acc.is_float))
    if low:
        back = cuda_c.convert("reinterpret_cast<const float*>(scratch)[i]", f32, out.dtype)
        vec = _vec("reinterpret_cast<const float*>(scratch)", f32, "out", out.dtype,
                   cuda_c.convert("a.v[e]", f32, out.dtype))
        kernels.append(
            _render(
                op, "scatter_convert", out.numel, "scatter_add: round the f32 sums once", scratch, copy=back,
                vec=vec, **fields
            )
        )
    return kernels


def lower_scatter(op: Op) -> list[Kernel]:
    """out = x; out[.., idx[i], ..] = src[i], the last i in row-major order winning where several
    name one position (the reference's order, whatever the GPU's thread order): a scratch array
    holds each position's winning i."""
    out = op.out.type
    if out.numel == 0:
        return []
    x, idx, src = (v.type for v in op.inputs)
    axis = op.attrs["axis"] % out.rank
    extent, inner = _split(idx.shape, axis)
    wide = isinstance(src.numel, symbolic.SymInt) or src.numel >= 2**31  # a size that may grow: 64 bits
    win_t, size = ("long long", 8) if wide else ("int", 4)
    fields = dict(inner=inner, extent=extent, axis_size=out.shape[axis], win_t=win_t)
    scratch = out.numel * size
    kernels = [_render(op, "scatter_init", out.numel, "scatter 1/3: copy x, no winners yet", scratch, **fields)]
    if src.numel:
        kernels += [_render(op, "scatter_claim", src.numel, "scatter 2/3: each position's last write", scratch,
                            **fields),
                    _render(op, "scatter_store", src.numel, "scatter 3/3: the last writes store", scratch, **fields)]
    return kernels


def lower_segment_sum(op: Op) -> list[Kernel]:
    """out = zeros; out[.., idx[i], ..] += src[.., i, ..] (duplicates add up; order is not
    deterministic), the index read once per slice element and 4 elements per access when a slice's
    length allows it (one 16-byte atomic on sm_90 for f32 sums). f32 and wider, integers: zero out,
    add src atomically. f16/bf16, whose sums are f32 rounded once: zero out and the f32 slots src
    adds to (only those: an embedding's rows looked up, not the whole table), add src into them,
    round them into out. No index is broadcast and no zero tensor read."""
    out = op.out.type
    if out.numel == 0:
        return []
    idx, src = (v.type for v in op.inputs)
    low = out.dtype in (f16, bf16)
    acc = f32 if low else out.dtype
    axis = op.attrs["axis"] % out.rank
    target = "reinterpret_cast<float*>(scratch)" if low else "out"
    extent, inner = _split(src.shape, axis)
    width = 4 if not isinstance(inner, symbolic.SymInt) and inner % 4 == 0 else 1
    fields = dict(inner=inner, extent=extent, axis_size=out.shape[axis], target=target, width=width,
                  src_t=src.dtype.cuda_type, out_t=out.dtype.cuda_type, acc_t=acc.cuda_type)
    scratch = out.numel * 4 if low else 0
    zero = cuda_c.convert("0", i64, out.dtype)
    if not low:
        kernels = [_render(op, "segment_zero", out.numel, "segment_sum 1/2: zero the sums", copy=zero,
                           vec=_vec(None, acc, target, acc, zero), **fields)]
    elif src.numel:
        slots = _render(op, "segment_slots", src.numel, "segment_sum 1/3: zero out and the f32 sums src adds to",
                        scratch, out_n=out.numel, out_zero=zero, **fields)
        kernels = [_per_vector(slots, max(out.numel, src.numel), width)]
    else:
        return [_render(op, "segment_zero", out.numel, "segment_sum: zeros", copy=zero, **{**fields, "target": "out"})]
    if not src.numel:
        return kernels
    each = _atomic_add(target, "at + e", "a[e]", acc)
    adds = _render(op, "segment_sum", src.numel, "segment_sum: atomically add src's slices", scratch,
                   value=cuda_c.load("s.v[e]", src.dtype), wide=acc == f32, each=each, **fields)
    # integer sums are exact whatever the order; floating-point ones change with it
    kernels.append(replace(_per_vector(adds, src.numel, width), deterministic=not acc.is_float))
    if low:
        back = cuda_c.convert("a.v[e]", f32, out.dtype)
        convert = _render(op, "segment_convert", src.numel, "segment_sum 3/3: round the f32 sums once", scratch,
                          back=back, **fields)
        kernels.append(_per_vector(convert, src.numel, width))
    return kernels


def _per_vector(kernel: Kernel, work, width: int) -> Kernel:
    """kernel launched with a thread per `width` elements of `work` (its loops run over the same
    threads when the buffers are not aligned); a dynamic size keeps the kernel's own grid."""
    if width == 1 or isinstance(work, symbolic.SymInt):
        return kernel
    return replace(kernel, grid=grid_for(-(-work // width), kernel.block))
