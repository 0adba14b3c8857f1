"""Kernels of the scans and the sort along one axis (cumsum, cumprod, logcumsumexp, the indices of
cummax / cummin, argsort), through
templates/scan.cu.j2. Correct first, simple on purpose: a scan runs one thread per line, in order (so
it rounds exactly as the reference); argsort places each element by counting the elements that sort
before it (n^2 / line work: fine for the rows of a batch or a vocabulary, slow for very long lines)."""

from __future__ import annotations

import math

from flame.codegen import cuda_c
from flame.codegen.kernel import Kernel, render_op
from flame.ir.dtypes import f32, f64
from flame.ir.graph import Op

# (identity, acc's next value from acc and the element {x}, what it is); logcumsumexp's step is PyTorch's
# _log_add_exp_helper (ir/ops/scan.log_add_exp), the reference's to the rounding of exp and log1p
_LOG_ADD_EXP = ("([](const auto a, const auto b) {{ const auto mn = b != b ? b : (b < a ? b : a); "
                "const auto mx = b != b ? b : (a < b ? b : a); "
                "return (mn != mx || isfinite(mn)) ? log1p(exp(mn - mx)) + mx : a; }})(acc, {x})")
_COMBINE = {"cumsum": (0, "(acc + {x})", "running sum"), "cumprod": (1, "(acc * {x})", "running product"),
            "logcumsumexp": (float("-inf"), _LOG_ADD_EXP, "running log-sum-exp")}


def _line(op: Op) -> tuple[int, int, int]:
    """(outer, extent, inner) of the op's input around its axis (a 0-d tensor is one line of one)."""
    shape = op.inputs[0].shape or (1,)
    axis = op.attrs["axis"] % len(shape)
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def lower_scan(op: Op) -> list[Kernel]:
    """cumsum / cumprod / logcumsumexp: acc (f64 for f32, f32 for f16/bf16) = acc op x[c], stored at every c."""
    if op.out.type.numel == 0:
        return []
    outer, extent, inner = _line(op)
    x = op.inputs[0].dtype
    acc = f64 if x == f32 else cuda_c.compute_dtype(x)  # torch's CPU acc_type: f32 runs in double, as the reference
    start, combine, what = _COMBINE[op.name]
    identity = cuda_c.literal(start, acc)
    return [render_op("scan.cu.j2", op, "scan", outer * inner, f"{what} along the axis, one thread per line",
                      what=what, extent=extent, inner=inner, acc_t=acc.cuda_type, identity=identity,
                      combine=combine.format(x=cuda_c.load("in0[at]", x)), store=cuda_c.convert("acc", acc, x))]


def lower_cumarg(op: Op) -> list[Kernel]:
    """cumarg (cummax / cummin's indices): one thread per line, in order, keeping the extreme so far and its index
    (the latest of equal ones; a NaN takes over), as the reference."""
    if op.out.type.numel == 0:
        return []
    outer, extent, inner = _line(op)
    x = op.inputs[0].dtype
    acc = cuda_c.compute_dtype(x)
    wins = "v >= best" if op.attrs["largest"] else "v <= best"  # a later equal extreme takes the index
    what = "running maximum's index" if op.attrs["largest"] else "running minimum's index"
    return [render_op("scan.cu.j2", op, "cumarg", outer * inner, f"{what} along the axis, one thread per line",
                      extent=extent, inner=inner, acc_t=acc.cuda_type,
                      take=f"c == 0 || v != v || (best == best && ({wins}))",
                      load_v=cuda_c.load("in0[at]", x))]


def lower_argsort(op: Op) -> list[Kernel]:
    if op.out.type.numel == 0:
        return []
    outer, extent, inner = _line(op)
    x = op.inputs[0].dtype
    acc = cuda_c.compute_dtype(x)
    return [render_op("scan.cu.j2", op, "argsort", outer * extent * inner, "stable argsort by counting",
                      extent=extent, inner=inner, acc_t=acc.cuda_type, descending=op.attrs["descending"],
                      load_v=cuda_c.load(f"in0[base + (off_t)c * {inner}]", x),
                      load_w=cuda_c.load(f"in0[base + (off_t)k * {inner}]", x))]
