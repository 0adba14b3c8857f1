"""Matmul through cuBLASLt (nvmath-python), DESIGN.md §6.

`run_matmul(call, buffers, stream)` runs a plan's MatmulCall through `matmul_into(out, a, b)`, which
computes out[..., m, n] = a[..., m, k] @ b[..., k, n] for contiguous row-major CuPy arrays, with NumPy
batch broadcasting; `ta` / `tb` say an operand is stored transposed ([..., k, m] / [..., n, k]). How
flame's row-major, batched, broadcast operands become the 2-D / 3-D strided views cuBLASLt takes is
decided in ONE place, `_layout`. One stateful
`nvmath.linalg.advanced.Matmul` is built and planned per (shapes, dtype, transposes, tf32) and
reused with new operands; it writes straight into `out` (in-place C with beta = 0).

Epilogues (`SUPPORTED_EPILOGUES`, flame.target.MATMUL_EPILOGUES) run inside the GEMM through
cuBLASLt: "bias" adds a [n] vector to every row, "relu" clamps at zero, "gelu" is GELU in its tanh
form (cuBLASLt has no erf form), "bias_relu" / "bias_gelu" do both; the "*_aux" forms also write the
pre-activation (a @ b [+ bias], what the backward of the GELU reads) to `aux`; "bgrad_a" / "bgrad_b"
also write the sum over k of op(a) ([m]) / op(b) ([n]) to `bgrad` (a Linear's bias gradient beside
its weight gradient). cuBLASLt's epilogues want a column-major result D (one bias value per row of
D), so an epilogue GEMM is issued transposed: D = out^T[n, m] = op(b)^T @ op(a)^T, cuBLASLt's
A = op(b)^T, B = op(a)^T, M = n, N = m, with out^T a column-major view of `out`. Hence:
- the bias is one value per row n of out^T, i.e. per column of out;
- the aux has D's layout, column-major [n, m] with leading dimension n: exactly the row-major
  [m, n] pre-activation, provided n is a multiple of 8 (cuBLASLt's GELU aux leading dimension;
  the fusion pass marks only such GEMMs);
- cuBLASLt's BGRADA sums its A = op(b)^T over k: one value per n, flame's "bgrad_b"; its BGRADB
  sums its B = op(a)^T over k: one value per m, flame's "bgrad_a".

No allocation during a call: nvmath's `execute` allocates every epilogue output (the aux, the bias
gradient) afresh from the device's memory pool. flame takes the output handlers off the planned
Matmul (`epilog_output_handlers`, set in `plan`), so execute allocates nothing, and before each call
points cuBLASLt's descriptor at the plan's buffers through those handlers' `update_pointer` (they set
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER / BIAS_POINTER on `mm_desc_ifc`; the leading dimension
and batch stride were set in `plan`).

Workspace: cuBLASLt draws its workspace (`workspace_bytes` of the output's size: at most
WORKSPACE_BYTES, what NVIDIA suggests on Hopper) from the bytes the plan placed in its arena for the
call (MatmulCall.workspace), handed to nvmath through `_PlanWorkspace` for the duration of one
execute; the pool holds no per-GEMM workspaces. A call without a planned workspace (not from a
plan) uses one fallback buffer per device.

f32 GEMMs use TF32 tensor cores only when `flame.runtime.matmul.allow_tf32 = True` (default off);
f16/bf16 accumulate in f32; f64 in f64. The cached objects assume one stream at a time.

Algorithms: cuBLASLt's heuristic ranks the algorithms a planned Matmul may run; flame runs its first.
With `autotune` on (FLAME_MATMUL_AUTOTUNE=1), the first execution of each cached Matmul doing at
least TUNE_MIN_FLOPS (outside a CUDA-graph capture) times every algorithm the plan returned on the
call's own operands (TUNE_REPS runs each in a CUDA graph, replayed once to warm up and once timed
by CUDA events) and runs the fastest from then on. Results may then differ by rounding from one
process to the next (the choice depends on timings), so it is off by default.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from flame.ir import symbolic
from flame.plan.steps import MatmulCall

allow_tf32 = False  # explicit opt-in: f32 matmuls round their inputs to TF32 (10-bit mantissa)
autotune = os.environ.get("FLAME_MATMUL_AUTOTUNE", "0") not in ("", "0")  # time the algorithms (module doc)
TUNE_MIN_FLOPS = 1 << 30  # smaller GEMMs keep the heuristic's first algorithm (timing them would read L2)
TUNE_REPS = 3
# flame epilogue -> cuBLASLt's (nvmath's MatmulEpilog), for the call issued transposed (module doc)
_EPILOG_NAMES = {"bias": "BIAS", "relu": "RELU", "bias_relu": "RELU_BIAS", "gelu": "GELU", "bias_gelu": "GELU_BIAS",
                 "gelu_aux": "GELU_AUX", "bias_gelu_aux": "GELU_AUX_BIAS", "bgrad_a": "BGRADB", "bgrad_b": "BGRADA"}
SUPPORTED_EPILOGUES = frozenset({"none", *_EPILOG_NAMES})
AUX_ALIGN = 8  # cuBLASLt's GELU aux: leading dimension (here: out's last dim) a multiple of this


WORKSPACE_BYTES = 32 << 20  # the most workspace a cuBLASLt call may use
_WORKSPACE_SLACK = 256  # nvmath asks for a little more than its memory_limit (alignment: 32784 of 32768)
_SPLITS = 4  # a call's workspace holds up to this many f32 partial results (split-K) of its output


def workspace_bytes(out_elements: int) -> int:
    """The workspace one GEMM writing `out_elements` results may use: room for _SPLITS f32 partial
    results of its output (what split-K and stream-K kernels draw on), at most WORKSPACE_BYTES. A small
    GEMM thus reserves little of the arena; cuBLASLt chooses among the algorithms that fit."""
    return symbolic.maximum(4096, symbolic.minimum(WORKSPACE_BYTES, -(-4 * _SPLITS * out_elements // 4096) * 4096))


_PLANS: dict[tuple, object] = {}
_OUTPUTS: dict[tuple, tuple] = {}  # key -> the epilogue output handlers taken off that planned Matmul
_CHOSEN: dict[tuple, object] = {}  # key -> the algorithm it runs (None: the heuristic's first)
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
    if len(out_shape) == 2:
        return Layout(a2, b2, (m, n), ta, tb)
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

        opts = MatmulOptions(inplace=True, compute_type=_compute_type(str(c.dtype)),
                             memory_limit=workspace_bytes(c.size) - _WORKSPACE_SLACK, allocator=_workspace(c.device.id))
        mm = Matmul(a, b, c, alpha=1.0, beta=0.0, options=opts, stream=stream)
        epilog = getattr(MatmulEpilog, _EPILOG_NAMES[epilogue]) if epilogue != "none" else None
        mm.plan(epilog=epilog, epilog_inputs=inputs, stream=stream)
        # execute() would allocate each epilogue output: flame keeps the handlers (module doc)
        _OUTPUTS[key], mm.epilog_output_handlers = tuple(mm.epilog_output_handlers), []
        _PLANS[key] = mm
    else:
        mm.reset_operands_unchecked(a=a, b=b, c=c, epilog_inputs=inputs, stream=stream)
    return mm


def algorithm_times(mm, stream, reps: int = TUNE_REPS) -> list[float]:
    """Milliseconds per run of planned Matmul mm with each of its plan's algorithms in turn, on its
    current operands (its result is overwritten): `reps` runs captured back to back in one CUDA graph,
    replayed once to warm up and once timed by CUDA events, so nvmath's host time per execute (often
    longer than a small GEMM) is not counted; inf where an algorithm fails. The epilogue outputs'
    pointers and the workspace must be set (as _execute does)."""
    import cupy

    side = cupy.cuda.Stream(non_blocking=True)
    times = []
    for alg in mm.algorithms:
        try:
            with side:
                side.begin_capture()
                try:
                    for _ in range(reps):
                        mm.execute(algorithm=alg, stream=side)
                finally:
                    graph = side.end_capture()
            graph.launch(stream)
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / reps)
        except Exception:  # noqa: BLE001 - an algorithm the heuristic listed may still refuse these operands
            times.append(math.inf)
    return times


def _choose(key: tuple, mm, stream, flops: int):
    """The algorithm key's Matmul runs (module doc: autotune); None: the heuristic's first."""
    if not autotune:
        return None
    if key in _CHOSEN:
        return _CHOSEN[key]
    if flops < TUNE_MIN_FLOPS or len(mm.algorithms) < 2:
        _CHOSEN[key] = None
        return None
    if stream.is_capturing():
        return None  # not remembered: a later execution outside a capture tunes it
    times = algorithm_times(mm, stream)
    best = min(range(len(times)), key=times.__getitem__)
    _CHOSEN[key] = None if best == 0 or times[best] == math.inf else mm.algorithms[best]
    return _CHOSEN[key]


def _execute(mm, workspace, stream, outputs: tuple = (), results: dict | None = None, key: tuple = (),
             flops: int = 0) -> None:
    """Run planned Matmul mm with `workspace` (a CuPy array of >= workspace_bytes(out), or None: the
    device's fallback buffer) as cuBLASLt's workspace; nvmath lets go of it when the call returns.
    outputs: the epilogue output handlers taken off mm; results: handler name ("gelu_aux",
    "bgrada", "bgradb") -> the CuPy array that output is written to."""
    import cupy

    for handler in outputs:
        handler.update_pointer(mm.mm_desc_ifc, results[handler.name].data.ptr)
    dev = cupy.cuda.Device().id
    if workspace is None:
        if dev not in _FALLBACK:
            _FALLBACK[dev] = cupy.empty(WORKSPACE_BYTES, cupy.uint8)
        workspace = _FALLBACK[dev]
    alloc = _workspace(dev)
    alloc.ptr, alloc.size = workspace.data.ptr, workspace.nbytes
    mm.execute(algorithm=_choose(key, mm, stream, flops), stream=stream, release_workspace=True)


def bgrad_supported(epilogue: str, ta: bool, tb: bool) -> bool:
    """Whether cuBLASLt runs bias-gradient epilogue `epilogue` with these transposes: only when the
    summed operand is stored [k, ...] (bgrad_a with a stored transposed, bgrad_b with b not). The
    other two layouts return CUBLAS_STATUS_NOT_SUPPORTED (H100, cuBLASLt 13, 2026-11-23)."""
    return ta if epilogue == "bgrad_a" else not tb if epilogue == "bgrad_b" else True


def _check(epilogue: str, out, bias, aux, bgrad, ta: bool = False, tb: bool = False) -> None:
    if epilogue not in SUPPORTED_EPILOGUES:
        raise ValueError(f"matmul epilogue {epilogue!r} is not one of {sorted(SUPPORTED_EPILOGUES)}")
    for name, arr, wanted in (("bias", bias, "bias" in epilogue), ("aux", aux, epilogue.endswith("_aux")),
                              ("bgrad", bgrad, epilogue.startswith("bgrad"))):
        if wanted != (arr is not None):
            raise ValueError(f"matmul epilogue {epilogue!r} {'needs' if wanted else 'takes no'} {name}")
    if aux is not None and (aux.shape != out.shape or aux.dtype != out.dtype or out.shape[-1] % AUX_ALIGN):
        raise ValueError(f"matmul aux must be like out {out.dtype}{list(out.shape)} with a last dim that is a "
                         f"multiple of {AUX_ALIGN}; got {aux.dtype}{list(aux.shape)}")
    if bgrad is not None and (out.ndim != 2 or bgrad.dtype != out.dtype):
        raise ValueError("matmul bgrad epilogues take 2-D GEMMs and a gradient of the result's dtype")
    if not bgrad_supported(epilogue, ta, tb):
        raise ValueError(f"matmul epilogue {epilogue!r} with ta={ta}, tb={tb}: cuBLASLt sums only an operand "
                         f"stored [k, ...] (bgrad_a needs ta=True, bgrad_b needs tb=False)")


def _empty_k(out, a, b, ta, epilogue, bias, aux, bgrad, stream) -> None:
    """The epilogue of a product over k = 0 (all zeros), without cuBLASLt."""
    import cupy

    from flame.ir.ops.elementwise import SQRT_2_OVER_PI

    with stream:
        out[...] = 0 if bias is None else bias.reshape(-1)
        if aux is not None:
            aux[...] = out
        if "relu" in epilogue:
            cupy.maximum(out, 0, out=out)
        if "gelu" in epilogue:
            x = out.astype(cupy.float32)
            out[...] = 0.5 * x * (1.0 + cupy.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
        if bgrad is not None:
            bgrad[...] = 0


def matmul_into(out, a, b, ta: bool = False, tb: bool = False, epilogue: str = "none", bias=None, *,
                aux=None, bgrad=None, stream=None, workspace=None) -> None:
    """out = epilogue(op(a) @ op(b) [+ bias]) on the given (default: current) CuPy stream; a, b, out,
    bias ([n], out's dtype), aux (out's shape and dtype: the pre-activation of a *_aux epilogue) and
    bgrad ([m] for bgrad_a, [n] for bgrad_b, size-1 dims aside) contiguous. epilogue is one of
    SUPPORTED_EPILOGUES."""
    import cupy

    _check(epilogue, out, bias, aux, bgrad, ta, tb)
    stream = stream or cupy.cuda.get_current_stream()
    if out.size == 0:
        return
    k = a.shape[-2] if ta else a.shape[-1]
    if k == 0:
        _empty_k(out, a, b, ta, epilogue, bias, aux, bgrad, stream)
        return
    lay = _layout(tuple(a.shape), tuple(b.shape), tuple(out.shape), ta, tb)
    key = (lay, str(out.dtype), allow_tf32, cupy.cuda.Device().id, epilogue)
    flops = 2 * out.size * k
    if epilogue == "none":
        with stream:
            av = _view(a, lay.a, lay.ta, lay.expand_a)
            bv = _view(b, lay.b, lay.tb, lay.expand_b)
        mm = _planned(key, av, bv, out.reshape(lay.out), stream)
        _execute(mm, workspace, stream, key=key, flops=flops)
        return
    with stream:  # transposed problem (module doc): A' = op(b)^T, B' = op(a)^T, C' = out^T
        av = _view(b, lay.b, not lay.tb, lay.expand_b)
        bv = _view(a, lay.a, not lay.ta, lay.expand_a)
    cv = out.reshape(lay.out).swapaxes(-1, -2)
    bias = None if bias is None else bias.reshape(-1)
    mm = _planned(key, av, bv, cv, stream, epilogue, bias)
    results = {"gelu_aux": aux, "bgrada": bgrad, "bgradb": bgrad}
    _execute(mm, workspace, stream, _OUTPUTS.get(key, ()), results, key, flops)


def run_matmul(s: MatmulCall, bufs: dict, stream) -> None:
    """Run plan step `s` on CuPy arrays bufs (buffer id -> array) on `stream`."""
    bias, aux, bgrad, ws = (None if b is None else bufs[b] for b in (s.bias, s.aux, s.bgrad, s.workspace))
    matmul_into(bufs[s.out], bufs[s.a], bufs[s.b], s.ta, s.tb, s.epilogue, bias, aux=aux, bgrad=bgrad, stream=stream,
                workspace=ws)


def clear_cache() -> None:
    """Free every cached Matmul (their workspaces and cuBLASLt descriptors)."""
    for mm in _PLANS.values():
        mm.free()
    _PLANS.clear()
    _OUTPUTS.clear()
    _CHOSEN.clear()
    _FALLBACK.clear()
