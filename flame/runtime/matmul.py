"""Matmul through cuBLASLt (nvmath-python's bindings), ARCHITECTURE.md "Matmul epilogues".

`run_matmul(call, buffers, stream)` runs a plan's MatmulCall through `matmul_into(out, a, b)`, which
computes out[..., m, n] = a[..., m, k] @ b[..., k, n] for contiguous row-major CuPy arrays, with NumPy
batch broadcasting; `ta` / `tb` say an operand is stored transposed ([..., k, m] / [..., n, k]). How
flame's row-major, batched, broadcast operands become the 2-D / 3-D strided views cuBLASLt takes is
decided in ONE place, `_layout`. One `_Gemm` (cuBLASLt's matmul descriptor, matrix layouts and the
algorithms its heuristic returned) is planned per (shapes, dtype, transposes, tf32, epilogue,
operand alignment) and reused with new pointers; it writes straight into `out` (beta = 0). Planning
goes through the raw bindings (`nvmath.bindings.cublasLt`): nvmath's `Matmul` object costs ~1.3 ms
per shape on an H100's host, most of a first call at a new batch size, the raw planning 0.07-0.16 ms
(benchmarks/results/2026-11-27-H100-host/). The matmul descriptors, matrix layouts and heuristic
preferences are shared by every problem needing the same one (`_Handles`), so a new batch size's GEMM
costs little more than its heuristic query: on an H200's host planning a GEMM at a new shape takes
27-32 us of host time besides the query, against 64-66 us with a descriptor, layouts and preference
made per problem (the query itself 22-35 us; benchmarks/results/2026-11-29-H200-suite/).

cuBLASLt is column-major, so every GEMM is issued transposed: D = out^T[n, m] = op(b)^T @ op(a)^T,
cuBLASLt's A = b, B = a (each row-major array is its own transpose read column-major), M = n, N = m.
Epilogues (`SUPPORTED_EPILOGUES`, flame.target.MATMUL_EPILOGUES) run inside the GEMM: "bias" adds a
[n] vector to every row of out (one value per row of D), "relu" clamps at zero, "gelu" is GELU in its
tanh form (cuBLASLt has no erf form), "bias_relu" / "bias_gelu" do both; the "*_aux" forms also write
the pre-activation (a @ b [+ bias], what the backward of the GELU reads) to `aux`, in D's layout:
column-major [n, m] with leading dimension n, exactly the row-major [m, n] pre-activation, provided n
is a multiple of 8 (cuBLASLt's GELU aux leading dimension; the fusion pass marks only such GEMMs);
"bgrad_a" / "bgrad_b" also write the sum over k of op(a) ([m]) / op(b) ([n]) to `bgrad` (a Linear's
bias gradient beside its weight gradient): cuBLASLt's BGRADB sums its B = a, BGRADA its A = b, into
the bias pointer. No allocation during a call: the caller's aux, bias gradient and workspace
pointers are set on the descriptor before each launch.

Workspace: cuBLASLt draws its workspace (`workspace_bytes` of the output's size: at most
WORKSPACE_BYTES, what NVIDIA suggests on Hopper) from the bytes the plan placed in its arena for the
call (MatmulCall.workspace); the heuristic only offers algorithms that fit it. A call without a
planned workspace (not from a plan) uses one fallback buffer per device.

FP8 GEMMs (`fp8_matmul_into`, the plan's fp8_matmul calls): a [m, k] and b [n, k] in e4m3 or e5m2
(not both e5m2), out in bf16/f16/f32, computed as (a @ b^T) * a_inv * b_inv with f32 accumulation.
cuBLASLt runs FP8 only in its "TN" form (its A transposed, B not), which issued transposed is exactly
flame's b stored [n, k] (tb) and a as is; its A/B scale pointers take b_inv / a_inv (device f32
scalars, set before each launch like the epilogue pointers), its matrix layouts the FP8 types and
its C/D the output type. k must be a multiple of 16 (FP8 leading dimensions of 16 bytes). CuPy has no
FP8 types: the operands are CuPy arrays of their bytes (uint8), their formats named by the plan's
dtypes. The path has passed its GPU tests (tests/runtime/test_fp8_gpu.py: within the precision of
Hopper's FP8 sums of the reference executor's exact emulation, ir/ops/fp8.py) and is on by default;
FLAME_FP8_GEMM=0 (`fp8_gemm`) turns it off, and an FP8 GEMM on the GPU then raises UnverifiedError
naming the switch.

f32 GEMMs use TF32 tensor cores only when `flame.runtime.matmul.allow_tf32 = True` (default off);
f16/bf16 accumulate in f32; f64 in f64. A planned _Gemm assumes one stream at a time.

Algorithms: cuBLASLt's heuristic ranks the algorithms a problem may run; flame runs its first.
With `autotune` on (FLAME_MATMUL_AUTOTUNE=1), the first execution of each planned GEMM doing at
least TUNE_MIN_FLOPS (outside a CUDA-graph capture) times every algorithm the heuristic returned on
the call's own operands (TUNE_REPS runs each in a CUDA graph, replayed once to warm up and once timed
by CUDA events) and runs the fastest from then on. Results may then differ by rounding from one
process to the next (the choice depends on timings), so it is off by default. FP8 GEMMs are timed so
whatever the switch (`fp8_autotune`, FLAME_FP8_AUTOTUNE=0 turns it off): the heuristic's first FP8
algorithm ran 547 TFLOP/s where the fastest ran 1086 at 8192 x 2048 x 2048 on an H200, and FP8 results
are not bit-reproducible across algorithms anyway (their sums keep about 13 bits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from flame._env import env_flag
from flame.errors import UnverifiedError
from flame.ir import symbolic
from flame.plan.steps import MatmulCall

allow_tf32 = False  # explicit opt-in: f32 matmuls round their inputs to TF32 (10-bit mantissa)
autotune = env_flag("FLAME_MATMUL_AUTOTUNE", False)  # time the algorithms (module doc)
fp8_gemm = env_flag("FLAME_FP8_GEMM", True)  # cuBLASLt's FP8 GEMM (module doc); =0 turns it off
# FP8 GEMMs time their algorithms whatever `autotune` says: the heuristic's first choice for FP8 runs at
# half the rate of the fastest at some shapes (module doc)
fp8_autotune = env_flag("FLAME_FP8_AUTOTUNE", True)
TUNE_MIN_FLOPS = 1 << 30  # smaller GEMMs keep the heuristic's first algorithm (timing them would read L2)
TUNE_REPS = 3
# flame epilogue -> cuBLASLt's (cublasLt.Epilogue), for the call issued transposed (module doc)
_EPILOG_NAMES = {"bias": "BIAS", "relu": "RELU", "bias_relu": "RELU_BIAS", "gelu": "GELU", "bias_gelu": "GELU_BIAS",
                 "gelu_aux": "GELU_AUX", "bias_gelu_aux": "GELU_AUX_BIAS", "bgrad_a": "BGRADB", "bgrad_b": "BGRADA"}
SUPPORTED_EPILOGUES = frozenset({"none", *_EPILOG_NAMES})
AUX_ALIGN = 8  # cuBLASLt's GELU aux: leading dimension (here: out's last dim) a multiple of this


WORKSPACE_BYTES = 32 << 20  # the most workspace a cuBLASLt call may use
_SPLITS = 4  # a call's workspace holds up to this many f32 partial results (split-K) of its output


def workspace_bytes(out_elements: int) -> int:
    """The workspace one GEMM writing `out_elements` results may use: room for _SPLITS f32 partial
    results of its output (what split-K and stream-K kernels draw on), at most WORKSPACE_BYTES. A small
    GEMM thus reserves little of the arena; cuBLASLt chooses among the algorithms that fit."""
    return symbolic.maximum(4096, symbolic.minimum(WORKSPACE_BYTES, -(-4 * _SPLITS * out_elements // 4096) * 4096))


def planned_workspace(a_shape: tuple, b_shape: tuple, out_shape: tuple, ta: bool, tb: bool, dtype_name: str,
                      epilogue: str) -> int:
    """The arena workspace to plan for one GEMM (operands as stored) on the current GPU: what the
    algorithm cuBLASLt's heuristic ranks first within workspace_bytes asks for (at least 4 KiB, so the
    call still gets its own), or workspace_bytes itself under FLAME_MATMUL_AUTOTUNE (which times every
    algorithm the bound admits). On an H200, for every GEMM of gpt_block_train and mlp_bf16_train the
    heuristic's first four algorithms ask for none, and run as fast with a 4 KiB workspace as with
    32 MiB, which would sit in the arena at the step's peak (benchmarks/results/2026-11-29-H200-memory-plan/)."""
    bound = int(workspace_bytes(math.prod(out_shape)))
    if autotune:
        return bound
    return _first_workspace(_layout(a_shape, b_shape, out_shape, ta, tb), dtype_name, epilogue, bound)


@lru_cache(maxsize=1024)
def _first_workspace(lay: Layout, dtype_name: str, epilogue: str, bound: int) -> int:
    import cupy

    gemm = _Gemm(lay, dtype_name, epilogue, (256, 256, 256), bound, cupy.cuda.Device().id)
    need = int(gemm.results["workspace_size"][0])
    return min(bound, max(4096, -(-need // 4096) * 4096))


_PLANS: dict[tuple, _Gemm] = {}  # key (matmul_into) -> its planned GEMM
_HANDLES: dict[int, int] = {}  # device id -> cuBLASLt handle
_FALLBACK: dict[int, object] = {}  # device id -> workspace for calls that come with none
_DATA_TYPES = {"float16": "CUDA_R_16F", "bfloat16": "CUDA_R_16BF", "float32": "CUDA_R_32F", "float64": "CUDA_R_64F",
               "float8_e4m3fn": "CUDA_R_8F_E4M3", "float8_e5m2": "CUDA_R_8F_E5M2"}
# run()'s pointer names -> cuBLASLt's matmul descriptor attribute (A/B: cuBLASLt's, i.e. flame's b/a)
_POINTER_ATTRS = {"bias": "BIAS_POINTER", "aux": "EPILOGUE_AUX_POINTER", "A_scale": "A_SCALE_POINTER",
                  "B_scale": "B_SCALE_POINTER"}


def _handle(device_id: int) -> int:
    if device_id not in _HANDLES:
        from nvmath.bindings import cublasLt

        _HANDLES[device_id] = cublasLt.create()
    return _HANDLES[device_id]


def _alignment(ptr: int) -> int:
    """The largest power of two dividing ptr, at most 256: what cuBLASLt's heuristic is told it may
    assume of an operand (its MIN_ALIGNMENT preferences), and part of the plan's key."""
    return min(256, ptr & -ptr) if ptr else 256


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


@lru_cache(maxsize=4096)
def _layout(a_shape, b_shape, out_shape, ta: bool, tb: bool) -> Layout:
    """Fold batch dimensions: b shared by every batch -> one GEMM with M = batch*m (when a is not
    transposed); one operand shared -> a batch stride of 0; equal batches -> a strided
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


def _expanded(x, expand: tuple[int, ...] | None):
    """x broadcast to `expand` and materialized (Layout: a partial broadcast of the batch dims)."""
    import cupy

    return x if expand is None else cupy.ascontiguousarray(cupy.broadcast_to(x, expand))


def _compute_type(dtype_name: str):
    from nvmath.bindings.cublas import ComputeType as CT

    if dtype_name == "float64":
        return CT.COMPUTE_64F
    if dtype_name == "float32" and allow_tf32:
        return CT.COMPUTE_32F_FAST_TF32
    return CT.COMPUTE_32F


class _Gemm:
    """One planned cuBLASLt problem (module doc: issued transposed, cuBLASLt's A = b, B = a): the
    matmul descriptor, matrix layouts and preference it was planned with (cuBLASLt objects shared by
    every problem that needs the same one, module doc: _Handles), the algorithms the heuristic returned
    (best first) and host scalars alpha = 1, beta = 0. run() points the descriptor at the call's
    epilogue buffers and launches."""

    def __init__(self, lay: Layout, dtype_name: str, epilogue: str, aligns: tuple[int, int, int], ws_limit: int,
                 device_id: int, operand_dtypes: tuple[str, str] | None = None):
        h = _handles()
        lt = self.lt = h.lt
        self.handle = _handle(device_id)
        self.tuned = False  # autotune timed its algorithms (_tune)
        nb = lay.out[0] if len(lay.out) == 3 else 1
        m, n = lay.out[-2:]
        aux = (n, m * n if nb > 1 else 0) if epilogue.endswith("_aux") else None
        self.desc, self.alpha_ptr, self.beta_ptr = h.descriptor(dtype_name, lay.tb, lay.ta, epilogue, aux,
                                                                fp8=operand_dtypes is not None)
        self.pointer, self._pointer_at = h.pointer, h.pointer_at  # the value of a pointer attribute run() sets
        attr = lt.MatmulDescAttribute
        self._attrs = {name: getattr(attr, a) for name, a in _POINTER_ATTRS.items()}
        a_type, b_type = operand_dtypes or (dtype_name, dtype_name)  # FP8 operands: another type than out's
        self.a, self.b, self.d = (h.layout(t, shape, nb) for t, shape in ((b_type, lay.b), (a_type, lay.a),
                                                                           (dtype_name, lay.out)))
        self.results = np.zeros(8, lt.matmul_heuristic_result_dtype)
        at, count = self.results.ctypes.data, h.count
        lt.matmul_algo_get_heuristic(self.handle, self.desc, self.a, self.b, self.d, self.d,
                                     h.preference(ws_limit, aligns), 8, at, h.count_at)
        if not count[0]:
            raise RuntimeError(f"cuBLASLt has no algorithm for a {dtype_name} GEMM of layout {lay}, epilogue "
                               f"{epilogue!r}, workspace {ws_limit} bytes")
        size = self.results.itemsize
        self.algorithms = [at + i * size for i in range(int(count[0]))]  # each result's algo
        self.algorithm = self.algorithms[0]

    def run(self, a: int, b: int, out: int, workspace, stream: int, epilogue_ptrs: dict,
            algorithm: int | None = None) -> None:
        """out = op(a) @ op(b) with the epilogue (pointers: "bias" (also a bias gradient's), "aux"; an FP8
        GEMM's "A_scale" / "B_scale", cuBLASLt's A = flame's b)."""
        lt = self.lt
        for name, ptr in epilogue_ptrs.items():
            self.pointer[0] = ptr
            lt.matmul_desc_set_attribute(self.desc, self._attrs[name], self._pointer_at, 8)
        lt.matmul(self.handle, self.desc, self.alpha_ptr, b, self.a, a, self.b, self.beta_ptr, out, self.d, out,
                  self.d, algorithm or self.algorithm, workspace.data.ptr, workspace.nbytes, stream)


class _Handles:
    """The cuBLASLt objects planned GEMMs share, made on first use and kept until clear_cache():
    matmul descriptors (per dtype, transposes, epilogue and aux layout; a GEMM of a new batch size
    shares its descriptor with the other sizes'), matrix layouts, heuristic preferences (per
    workspace bound and operand alignments), and the alpha = 1, beta = 0 scalars. Sharing leaves a
    new size's GEMM little more than its heuristic query to pay (module doc). The pointer attributes
    run() sets on a shared descriptor are set before every launch, so sharing never carries one
    call's pointers into another's."""

    def __init__(self):
        from nvmath import CudaDataType
        from nvmath.bindings import cublasLt as lt

        self.lt, self.types = lt, CudaDataType
        self.descriptors: dict[tuple, tuple[int, int, int]] = {}
        self.layouts: dict[tuple, int] = {}
        self.preferences: dict[tuple, int] = {}
        self.scalars: list[np.ndarray] = []  # alpha and beta arrays, kept alive for their pointers
        # what a pointer attribute is set from (cuBLASLt copies the value) and where the heuristic counts
        self.pointer, self.count = np.zeros(1, np.uint64), np.zeros(1, np.int32)
        self.pointer_at, self.count_at = self.pointer.ctypes.data, self.count.ctypes.data

    def descriptor(self, dtype_name: str, trans_a: bool, trans_b: bool, epilogue: str,
                   aux: tuple[int, int] | None, fp8: bool = False) -> tuple[int, int, int]:
        """(descriptor, alpha pointer, beta pointer) for cuBLASLt's transposes and epilogue; aux: the
        GELU aux output's (leading dimension, batch stride) for the *_aux epilogues. FP8 GEMMs get
        descriptors of their own (their scale pointers are never set on another GEMM's)."""
        key = (dtype_name, allow_tf32, trans_a, trans_b, epilogue, aux, fp8)
        if key not in self.descriptors:
            lt, f64 = self.lt, dtype_name == "float64"
            scale_type = self.types.CUDA_R_64F if f64 else self.types.CUDA_R_32F
            desc = lt.matmul_desc_create(int(_compute_type(dtype_name)), int(scale_type))
            attr = lt.MatmulDescAttribute
            values = [(attr.TRANSA, np.array([int(trans_a)], np.int32)),
                      (attr.TRANSB, np.array([int(trans_b)], np.int32))]
            if epilogue != "none":
                values.append((attr.EPILOGUE, np.array([int(getattr(lt.Epilogue, _EPILOG_NAMES[epilogue]))],
                                                       np.uint32)))
            if aux is not None:
                values.append((attr.EPILOGUE_AUX_LD, np.array([aux[0]], np.int64)))
                if aux[1]:
                    values.append((attr.EPILOGUE_AUX_BATCH_STRIDE, np.array([aux[1]], np.int64)))
            for name, value in values:
                lt.matmul_desc_set_attribute(desc, name, value.ctypes.data, value.nbytes)
            scalar = np.float64 if f64 else np.float32
            alpha, beta = np.ones(1, scalar), np.zeros(1, scalar)
            self.scalars += [alpha, beta]
            self.descriptors[key] = (desc, alpha.ctypes.data, beta.ctypes.data)
        return self.descriptors[key]

    def layout(self, dtype_name: str, shape: tuple[int, ...], nb: int) -> int:
        """A stored row-major [rows, cols] matrix (or a batch of them, or one shared by a batch of nb)
        as cuBLASLt sees it: column-major cols x rows, leading dimension cols."""
        r, c = shape[-2:]
        stride = r * c if len(shape) == 3 else 0
        key = (dtype_name, r, c, nb, stride)
        if key not in self.layouts:
            lt = self.lt
            h = lt.matrix_layout_create(int(getattr(self.types, _DATA_TYPES[dtype_name])), c, r, c)
            if nb > 1:
                for attr, value in ((lt.MatrixLayoutAttribute.BATCH_COUNT, np.array([nb], np.int32)),
                                    (lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET, np.array([stride], np.int64))):
                    lt.matrix_layout_set_attribute(h, attr, value.ctypes.data, value.nbytes)
            self.layouts[key] = h
        return self.layouts[key]

    def preference(self, ws_limit: int, aligns: tuple[int, int, int]) -> int:
        """The heuristic's preference: at most ws_limit bytes of workspace; the operands' alignments
        (a, b, out: cuBLASLt's B, A, C and D)."""
        key = (ws_limit, aligns)
        if key not in self.preferences:
            lt = self.lt
            pref = lt.matmul_preference_create()
            p = lt.MatmulPreferenceAttribute
            for name, value, kind in ((p.MAX_WORKSPACE_BYTES, ws_limit, np.uint64),
                                      (p.MIN_ALIGNMENT_A_BYTES, aligns[1], np.uint32),
                                      (p.MIN_ALIGNMENT_B_BYTES, aligns[0], np.uint32),
                                      (p.MIN_ALIGNMENT_C_BYTES, aligns[2], np.uint32),
                                      (p.MIN_ALIGNMENT_D_BYTES, aligns[2], np.uint32)):
                buf = np.array([value], kind)
                lt.matmul_preference_set_attribute(pref, name, buf.ctypes.data, buf.nbytes)
            self.preferences[key] = pref
        return self.preferences[key]

    def free(self) -> None:
        lt = self.lt
        for h in self.layouts.values():
            lt.matrix_layout_destroy(h)
        for desc, _, _ in self.descriptors.values():
            lt.matmul_desc_destroy(desc)
        for pref in self.preferences.values():
            lt.matmul_preference_destroy(pref)
        self.layouts, self.descriptors, self.preferences, self.scalars = {}, {}, {}, []


_SHARED: list[_Handles] = []  # the one _Handles, made on first use (cuBLASLt is imported lazily)


def _handles() -> _Handles:
    if not _SHARED:
        _SHARED.append(_Handles())
    return _SHARED[0]


def algorithm_times(gemm: _Gemm, call, stream, reps: int = TUNE_REPS) -> list[float]:
    """Milliseconds per run of each algorithm the heuristic returned for `gemm`: call(algorithm)
    launches it on the call's own operands (its result is overwritten), `reps` times captured back to
    back in one CUDA graph, replayed once to warm up and once timed by CUDA events, so the host time
    of a launch (longer than a small GEMM) is not counted; inf where an algorithm fails."""
    import cupy

    side = cupy.cuda.Stream(non_blocking=True)
    times = []
    for alg in gemm.algorithms:
        try:
            with side:
                side.begin_capture()
                try:
                    for _ in range(reps):
                        call(alg, side.ptr)
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


def _tune(gemm: _Gemm, call, stream, flops: int) -> None:
    """Module doc (autotune): time gemm's algorithms once, at its first execution outside a capture,
    and keep the fastest."""
    if gemm.tuned or flops < TUNE_MIN_FLOPS or len(gemm.algorithms) < 2:
        return
    if stream.is_capturing():
        return  # a later execution outside a capture tunes it
    times = algorithm_times(gemm, call, stream)
    best = min(range(len(times)), key=times.__getitem__)
    if times[best] < math.inf:
        gemm.algorithm = gemm.algorithms[best]
    gemm.tuned = True


def bgrad_supported(epilogue: str, ta: bool, tb: bool) -> bool:
    """Whether cuBLASLt runs bias-gradient epilogue `epilogue` with these transposes: only when the
    summed operand is stored [k, ...] (bgrad_a with a stored transposed, bgrad_b with b not). The
    other two layouts return CUBLAS_STATUS_NOT_SUPPORTED (cuBLASLt 13)."""
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
    if not (a.dtype == b.dtype == out.dtype):
        raise ValueError(f"matmul operands and result must share a dtype; got {a.dtype} @ {b.dtype} -> {out.dtype}")
    lay = _layout(tuple(a.shape), tuple(b.shape), tuple(out.shape), ta, tb)
    if lay.expand_a is not None or lay.expand_b is not None:
        with stream:
            a, b = _expanded(a, lay.expand_a), _expanded(b, lay.expand_b)
    dev = cupy.cuda.runtime.getDevice()
    workspace = _workspace(workspace, dev)
    ws_limit = min(int(workspace_bytes(out.size)), workspace.nbytes)
    aligns = (_alignment(a.data.ptr), _alignment(b.data.ptr), _alignment(out.data.ptr))
    key = (lay, str(out.dtype), allow_tf32, dev, epilogue, aligns, ws_limit)
    gemm = _PLANS.get(key)
    if gemm is None:
        gemm = _PLANS[key] = _Gemm(lay, str(out.dtype), epilogue, aligns, ws_limit, dev)
    ptrs = {}
    if bias is not None or bgrad is not None:  # cuBLASLt writes a bias gradient to its bias pointer
        ptrs["bias"] = (bias if bias is not None else bgrad).data.ptr
    if aux is not None:
        ptrs["aux"] = aux.data.ptr
    a_ptr, b_ptr, out_ptr = a.data.ptr, b.data.ptr, out.data.ptr
    if autotune:
        _tune(gemm, lambda algorithm, stream_ptr: gemm.run(a_ptr, b_ptr, out_ptr, workspace, stream_ptr, ptrs,
                                                           algorithm), stream, 2 * out.size * k)
    gemm.run(a_ptr, b_ptr, out_ptr, workspace, stream.ptr, ptrs)


def _workspace(workspace, dev: int):
    if workspace is None:
        if dev not in _FALLBACK:
            import cupy

            _FALLBACK[dev] = cupy.empty(WORKSPACE_BYTES, cupy.uint8)
        workspace = _FALLBACK[dev]
    return workspace


def fp8_matmul_into(out, a, b, a_inv, b_inv, epilogue: str = "none", bias=None, *, formats: tuple[str, str],
                    aux=None, stream=None, workspace=None) -> None:
    """out = epilogue((a @ b^T) * a_inv * b_inv [+ bias]) through cuBLASLt's FP8 GEMM (module doc): a [m, k]
    and b [n, k] contiguous CuPy arrays of FP8 bytes (uint8: CuPy has no FP8 types), formats their FP8
    types ("float8_e4m3fn" or "float8_e5m2", a's then b's), a_inv / b_inv f32 device scalars, out [m, n].
    Raises UnverifiedError when FLAME_FP8_GEMM=0 turned the path off."""
    import cupy

    if not fp8_gemm:
        raise UnverifiedError("FP8 GEMMs through cuBLASLt are turned off (FLAME_FP8_GEMM=0 in the environment); "
                              "unset it to run them, or train FP8 on the reference executor (FLAME_DEVICE=reference)")
    _check(epilogue, out, bias, aux, None, False, True)
    if epilogue.startswith("bgrad") or a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"FP8 GEMM: a [m, k] and b [n, k] without a bias-gradient epilogue; got a {list(a.shape)}, "
                         f"b {list(b.shape)}, epilogue {epilogue!r}")
    stream = stream or cupy.cuda.get_current_stream()
    if out.size == 0:
        return
    if a.shape[1] == 0:
        _empty_k(out, a, b, False, epilogue, bias, aux, None, stream)
        return
    if a.shape[1] % 16 or a.shape[0] % 16 or b.shape[0] % 16:
        raise ValueError(f"FP8 GEMM: cuBLASLt needs m, n and k multiples of 16; got m={a.shape[0]}, n={b.shape[0]}, "
                         f"k={a.shape[1]}")
    lay = _layout(tuple(a.shape), tuple(b.shape), tuple(out.shape), False, True)
    dev = cupy.cuda.runtime.getDevice()
    workspace = _workspace(workspace, dev)
    ws_limit = min(int(workspace_bytes(out.size)), workspace.nbytes)
    aligns = (_alignment(a.data.ptr), _alignment(b.data.ptr), _alignment(out.data.ptr))
    operands = tuple(formats)
    if any(f not in ("float8_e4m3fn", "float8_e5m2") for f in operands) or a.dtype.itemsize + b.dtype.itemsize != 2:
        raise ValueError(f"FP8 GEMM: operands of one byte in FP8 formats float8_e4m3fn / float8_e5m2; got "
                         f"{a.dtype} / {b.dtype} arrays as {operands}")
    key = (lay, str(out.dtype), operands, dev, epilogue, aligns, ws_limit)
    gemm = _PLANS.get(key)
    if gemm is None:
        gemm = _PLANS[key] = _Gemm(lay, str(out.dtype), epilogue, aligns, ws_limit, dev, operands)
    ptrs = {"A_scale": b_inv.data.ptr, "B_scale": a_inv.data.ptr}
    if bias is not None:
        ptrs["bias"] = bias.data.ptr
    if aux is not None:
        ptrs["aux"] = aux.data.ptr
    a_ptr, b_ptr, out_ptr = a.data.ptr, b.data.ptr, out.data.ptr
    if autotune or fp8_autotune:
        _tune(gemm, lambda algorithm, stream_ptr: gemm.run(a_ptr, b_ptr, out_ptr, workspace, stream_ptr, ptrs,
                                                           algorithm), stream, 2 * out.size * a.shape[1])
    gemm.run(a_ptr, b_ptr, out_ptr, workspace, stream.ptr, ptrs)


def run_matmul(s: MatmulCall, bufs: dict, stream) -> None:
    """Run plan step `s` on CuPy arrays bufs (buffer id -> array) on `stream`."""
    bias, aux, bgrad, ws = (None if b is None else bufs[b] for b in (s.bias, s.aux, s.bgrad, s.workspace))
    if s.a_scale is not None:  # fp8_matmul: b is [n, k] as the op takes it; a folded transpose cannot be run
        if s.ta or s.tb:
            raise ValueError(f"FP8 GEMM {s.op.name}: its operands must be stored as the op takes them (cuBLASLt's "
                             f"TN form), not through a folded transpose (ta={s.ta}, tb={s.tb})")
        formats = tuple(str(v.type.dtype.np_dtype) for v in s.op.inputs[:2])
        fp8_matmul_into(bufs[s.out], bufs[s.a], bufs[s.b], bufs[s.a_scale], bufs[s.b_scale], s.epilogue, bias,
                        formats=formats, aux=aux, stream=stream, workspace=ws)
        return
    matmul_into(bufs[s.out], bufs[s.a], bufs[s.b], s.ta, s.tb, s.epilogue, bias, aux=aux, bgrad=bgrad, stream=stream,
                workspace=ws)


def clear_cache() -> None:
    """Forget every planned GEMM, free the cuBLASLt objects they shared (_Handles) and the fallback
    workspaces."""
    _PLANS.clear()
    if _SHARED:
        _SHARED.pop().free()
    _FALLBACK.clear()
    _first_workspace.cache_clear()
