"""Matmul through cuBLASLt (nvmath-python), DESIGN.md §6.

`run_matmul(call, buffers, stream)` runs a plan's MatmulCall through `matmul_into(out, a, b)`, which
computes out[..., m, n] = a[..., m, k] @ b[..., k, n] for contiguous row-major CuPy arrays, with NumPy
batch broadcasting; `ta` / `tb` say an operand is stored transposed ([..., k, m] / [..., n, k]). How
flame's row-major, batched, broadcast operands become the 2-D / 3-D strided views cuBLASLt takes is
decided in ONE place, `_layout`. One stateful
`nvmath.linalg.advanced.Matmul` is built and planned per (shapes, dtype, transposes, tf32) and
reused with new operands; it writes straight into `out` (in-place C with beta = 0).

Epilogues (`SUPPORTED_EPILOGUES`) run inside the GEMM through cuBLASLt: "bias" adds a [n] vector to
every row, "relu" clamps at zero, "bias_relu" does both (relu(a @ b + bias)). cuBLASLt broadcasts its
bias along the columns of a column-major result (one value per row of D), so an epilogue GEMM is
issued transposed: out^T[n, m] = op(b)^T @ op(a)^T, with out^T a column-major view of `out` and the
bias one value per row n of out^T, i.e. per column of out.

Workspace: cuBLASLt draws its workspace (`workspace_bytes` of the output's size: at most WORKSPACE_BYTES,
what NVIDIA suggests on Hopper) from the bytes the plan placed in its arena for the call (MatmulCall.workspace), handed to nvmath
through `_PlanWorkspace` for the duration of one execute; the pool holds no per-GEMM workspaces. A
call without a planned workspace (not from a plan) uses one fallback buffer per device.

f32 GEMMs use TF32 tensor cores only when `flame.runtime.matmul.allow_tf32 = True` (default off);
f16/bf16 accumulate in f32; f64 in f64. The cached objects assume one stream at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flame.plan.steps import MatmulCall

allow_tf32 = False  # explicit opt-in: f32 matmuls round their inputs to TF32 (10-bit mantissa)
_EPILOG_NAMES = {"bias": "BIAS", "relu": "RELU", "bias_relu": "RELU_BIAS"}
SUPPORTED_EPILOGUES = frozenset({"none", *_EPILOG_NAMES})


WORKSPACE_BYTES = 32 << 20  # the most workspace a cuBLASLt call may use
_SPLITS = 4  # a call's workspace holds up to this many f32 partial results (split-K) of its output


def workspace_bytes(out_elements: int) -> int:
    """The workspace one GEMM writing `out_elements` results may use: room for _SPLITS f32 partial
    results of its output (what split-K and stream-K kernels draw on), at most WORKSPACE_BYTES. A small
    GEMM thus reserves little of the arena; cuBLASLt chooses among the algorithms that fit."""
    return min(WORKSPACE_BYTES, -(-4 * _SPLITS * out_elements // 4096) * 4096)

_PLANS: dict[tuple, object] = {}
_WORKSPACES: dict[int, _PlanWorkspace] = {}  # device id -> the allocator every Matmul on it draws from
_FALLBACK: dict[int, object] = {}  # device id -> workspace for calls that come with none


class _PlanWorkspace:
    """nvmath's allocator (the BaseCUDAMemoryManager protocol) for cuBLASLt workspaces: it hands out
    the bytes set in `ptr`/`size` by the call being run (the plan's arena scratch), never allocating."""

    def __init__(self, device_id: int):
        self.device_id, self.ptr, self.size = device_id, 0, 0

    def memalloc(self, size: int):
        from nvmath.memory import MemoryPointer

        if size > self.size:
            raise MemoryError(f"cuBLASLt asked for {size} bytes of workspace; the plan holds {self.size}")
        return MemoryPointer(self.ptr, size, finalizer=None)


def _workspace(device_id: int) -> _PlanWorkspace:
    if device_id not in _WORKSPACES:
        _WORKSPACES[device_id] = _PlanWorkspace(device_id)
    return _WORKSPACES[device_id]


@dataclass(frozen=True)
class Layout:
    """How to view the operands for cuBLASLt. a, b, out: shapes to reshape each contiguous buffer
    to (as stored); ta / tb: swap the last two axes of that view; expand_a / expand_b: materialize a
    broadcast first (only when the batch shapes broadcast partially, e.g. [2,1] with [1,3])."""

    a: tuple[int, ...]
    b: tuple[int, ...]
    out: tuple[int, ...]
    ta: bool
    tb: bool
    expand_a: tuple[int, ...] | None = None
    expand_b: tuple[int, ...] | None = None


def _layout(a_shape, b_shape, out_shape, ta: bool, tb: bool) -> Layout:
    """Fold batch dimensions: b shared by every batch -> one GEMM with M = batch*m (when a is not
    transposed); one operand shared -> nvmath broadcasts a 2-D operand; equal batches -> a strided
    batched GEMM over the flattened batch; otherwise expand the operands to the full batch."""
    m, n = out_shape[-2:]
    k = a_shape[-2] if ta else a_shape[-1]
    batch = out_shape[:-2]
    nb, na_b, nb_b = math.prod(batch), math.prod(a_shape[:-2]), math.prod(b_shape[:-2])
    a2, b2 = a_shape[-2:], b_shape[-2:]
    if nb_b == 1 and na_b == nb and not ta:
        return Layout((nb * m, k), b2, (nb * m, n), False, tb)
    if nb_b == 1 and na_b == nb:
        return Layout((nb,) + a2, b2, (nb, m, n), ta, tb)
    if na_b == 1 and nb_b == nb:
        return Layout(a2, (nb,) + b2, (nb, m, n), ta, tb)
    if na_b == nb and nb_b == nb:
        return Layout((nb,) + a2, (nb,) + b2, (nb, m, n), ta, tb)
    return Layout((nb,) + a2, (nb,) + b2, (nb, m, n), ta, tb, batch + a2, batch + b2)


def _view(x, shape: tuple[int, ...], transposed: bool, expand: tuple[int, ...] | None):
    import cupy

    if expand is not None:
        x = cupy.ascontiguousarray(cupy.broadcast_to(x, expand))
    x = x.reshape(shape)
    return x.swapaxes(-1, -2) if transposed else x


def _compute_type(dtype_name: str):
    from nvmath.linalg.advanced import MatmulComputeType as CT

    if dtype_name == "float64":
        return CT.COMPUTE_64F
    if dtype_name == "float32" and allow_tf32:
        return CT.COMPUTE_32F_FAST_TF32
    return CT.COMPUTE_32F


def _planned(key: tuple, a, b, c, stream, epilogue: str = "none", bias=None):
    """The cached, planned nvmath Matmul for key, pointed at operands a, b, result c (and bias)."""
    mm = _PLANS.get(key)
    inputs = {"bias": bias} if "bias" in epilogue else None
    if mm is None:
        from nvmath.linalg.advanced import Matmul, MatmulEpilog, MatmulOptions

        opts = MatmulOptions(inplace=True, compute_type=_compute_type(str(c.dtype)), memory_limit=workspace_bytes(c.size),
                             allocator=_workspace(c.device.id))
        mm = Matmul(a, b, c, alpha=1.0, beta=0.0, options=opts, stream=stream)
        epilog = getattr(MatmulEpilog, _EPILOG_NAMES[epilogue]) if epilogue != "none" else None
        mm.plan(epilog=epilog, epilog_inputs=inputs, stream=stream)
        _PLANS[key] = mm
    else:
        mm.reset_operands_unchecked(a=a, b=b, c=c, epilog_inputs=inputs, stream=stream)
    return mm


def _execute(mm, workspace, stream) -> None:
    """Run planned Matmul mm with `workspace` (a CuPy array of >= workspace_bytes(out), or None: the
    device's fallback buffer) as cuBLASLt's workspace; nvmath lets go of it when the call returns."""
    import cupy

    dev = cupy.cuda.Device().id
    if workspace is None:
        if dev not in _FALLBACK:
            _FALLBACK[dev] = cupy.empty(WORKSPACE_BYTES, cupy.uint8)
        workspace = _FALLBACK[dev]
    alloc = _workspace(dev)
    alloc.ptr, alloc.size = workspace.data.ptr, workspace.nbytes
    mm.execute(stream=stream, release_workspace=True)


def matmul_into(out, a, b, ta: bool = False, tb: bool = False, epilogue: str = "none", bias=None, *,
                stream=None, workspace=None) -> None:
    """out = epilogue(op(a) @ op(b) [+ bias]) on the given (default: current) CuPy stream; a, b, out
    and bias ([n], out's dtype) contiguous. epilogue is one of SUPPORTED_EPILOGUES."""
    import cupy

    if epilogue not in SUPPORTED_EPILOGUES:
        raise ValueError(f"matmul epilogue {epilogue!r} is not one of {sorted(SUPPORTED_EPILOGUES)}")
    if ("bias" in epilogue) != (bias is not None):
        raise ValueError(f"matmul epilogue {epilogue!r} {'needs' if bias is None else 'takes no'} bias")
    stream = stream or cupy.cuda.get_current_stream()
    if out.size == 0:
        return
    k = a.shape[-2] if ta else a.shape[-1]
    if k == 0:
        with stream:
            out[...] = 0 if bias is None else bias
            if "relu" in epilogue:
                cupy.maximum(out, 0, out=out)
        return
    lay = _layout(tuple(a.shape), tuple(b.shape), tuple(out.shape), ta, tb)
    key = (lay, str(out.dtype), allow_tf32, cupy.cuda.Device().id, epilogue)
    if epilogue == "none":
        with stream:
            av = _view(a, lay.a, lay.ta, lay.expand_a)
            bv = _view(b, lay.b, lay.tb, lay.expand_b)
        mm = _planned(key, av, bv, out.reshape(lay.out), stream)
        _execute(mm, workspace, stream)
        return
    with stream:  # transposed problem (module doc): A' = op(b)^T, B' = op(a)^T, C' = out^T
        av = _view(b, lay.b, not lay.tb, lay.expand_b)
        bv = _view(a, lay.a, not lay.ta, lay.expand_a)
    cv = out.reshape(lay.out).swapaxes(-1, -2)
    _execute(_planned(key, av, bv, cv, stream, epilogue, bias), workspace, stream)


def run_matmul(s: MatmulCall, bufs: dict, stream) -> None:
    """Run plan step `s` on CuPy arrays bufs (buffer id -> array) on `stream`."""
    bias = None if s.bias is None else bufs[s.bias]
    ws = None if s.workspace is None else bufs[s.workspace]
    matmul_into(bufs[s.out], bufs[s.a], bufs[s.b], s.ta, s.tb, s.epilogue, bias, stream=stream, workspace=ws)


def clear_cache() -> None:
    """Free every cached Matmul (their workspaces and cuBLASLt descriptors)."""
    for mm in _PLANS.values():
        mm.free()
    _PLANS.clear()
    _FALLBACK.clear()
