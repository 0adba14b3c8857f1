"""The CUDA executor's step handlers: one handler per step type, the one place plan steps become GPU
work (ARCHITECTURE.md "Plans are data").

handler(step, loaded kernel or None, buffers (id -> CuPy array), stream); the executor
(runtime/cuda.py) and `flame check` / `flame profile` (runtime.stepwise) run steps through these:
`prepare` pairs each step with its handler and loaded kernel once, `run_program` issues them.

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flame.errors import FlameError
from flame.ir.dtypes import is_ml_dtype
from flame.plan.steps import (
    Alias,
    AttentionCall,
    CollectiveCall,
    ConvCall,
    Copy,
    HostCopy,
    KernelLaunch,
    MatmulCall,
    Step,
    Wait,
)
from flame.runtime.communicator import run_collective
from flame.runtime.cuda_kernels import source_key
from flame.runtime.cuda_streams import _events, _fork
from flame.runtime.matmul import run_matmul


def cupy_dtype(dt) -> np.dtype:
    """The dtype of a CuPy array holding a buffer of IR dtype `dt`: CuPy has no FP8 types, so an FP8
    buffer is held as its bytes (uint8); kernels and cuBLASLt read them by the plan's dtype."""
    return np.dtype(np.uint8) if dt.is_float8 else dt.np_dtype


def cupy_storage(a: np.ndarray) -> np.ndarray:
    """A host array as CuPy can take it: FP8 (ml_dtypes) as its bytes (cupy_dtype)."""
    return a.view(np.uint8) if a.dtype.itemsize == 1 and is_ml_dtype(a.dtype) else a


def _kernel(s: KernelLaunch, fn, bufs: dict, stream) -> None:
    if s.grid > 0:
        sizes = [np.int64(n) for n in s.sizes]  # a dynamic dim's size (flame.ir.symbolic)
        fn((s.grid,), (s.block,), [bufs[a] for a in s.args] + sizes, shared_mem=s.smem, stream=stream)


def _matmul(s: MatmulCall, fn, bufs: dict, stream) -> None:
    run_matmul(s, bufs, stream)


def _attention_graph(s: AttentionCall):
    """The call's cuDNN graphs (for the op at the call's layouts: part of the spec, so of the graph
    cache's key), the one it runs built, and the workspace that call needs."""
    from flame.runtime.cudnn_attention import cudnn_attention, spec_of, workspace_bytes

    att = cudnn_attention(spec_of(s.op, s.layouts))
    return att, workspace_bytes(s.op, s.stats_op is not None, exact=True, att=att)


def _attention(s: AttentionCall, fn, bufs: dict, stream) -> None:
    """cuDNN's graphs for the op at the call's layouts, on the operands' strided views of their buffers."""
    import cupy

    from flame.runtime.cudnn_attention import STATS

    att, need = _attention_graph(s)
    ws = None if s.workspace is None else bufs[s.workspace]
    held = 0 if ws is None else ws.nbytes
    if held < need:
        raise FlameError(f"attention call for {s.op.name}: cuDNN needs {need} bytes of workspace, the plan "
                         f"holds {held}")
    ws = 0 if ws is None else ws  # no workspace planned: cuDNN asked for none
    mask = None if s.mask is None else bufs[s.mask]
    a = s.arrays(bufs, cupy.lib.stride_tricks.as_strided)
    with stream:
        if s.backward:
            att.backward(a["q"], a["k"], a["v"], a["o"], a["grad_out"], bufs[s.stats], (a["dq"], a["dk"], a["dv"]),
                         mask, ws)
        elif s.op.name == STATS:  # the statistics alone: the forward's output goes to the workspace
            att.forward(a["q"], a["k"], a["v"], None, bufs[s.out], mask, ws)
        else:
            att.forward(a["q"], a["k"], a["v"], a["o"], None if s.stats is None else bufs[s.stats], mask, ws)


def _collective(s: CollectiveCall, fn, bufs: dict, stream) -> None:
    """NCCL through the process group's communicator (runtime/nccl.py). Overlapped (s.overlap): on
    the communication stream (_fork), finished by the matching Wait."""
    if not s.overlap:
        with stream:
            run_collective(s, bufs, stream)
        return
    side, done = _fork(stream, "comm", s.out, s.op)
    with side:
        run_collective(s, bufs, side)
    done.record(side)


def _side_kernel(s: KernelLaunch, fn, bufs: dict, stream) -> None:
    """An update's kernel (s.side) on the side stream (_fork), finished by the matching Wait."""
    side, done = _fork(stream, "side", s.out, s.ops[0])
    _kernel(s, fn, bufs, side)
    done.record(side)


def _wait(s: Wait, fn, bufs: dict, stream) -> None:
    stream.wait_event(_events(s.out, s.op)[1])


def _conv_graph(s: ConvCall):
    from flame.runtime.cudnn_conv import cudnn_conv, spec_of

    return cudnn_conv(spec_of(s.op))


def _conv(s: ConvCall, fn, bufs: dict, stream) -> None:
    conv = _conv_graph(s)
    ws = 0 if s.workspace is None else bufs[s.workspace]
    if conv.workspace > (0 if s.workspace is None else ws.nbytes):
        raise FlameError(f"conv_{s.kind} call for {s.op.name}: cuDNN needs {conv.workspace} bytes of workspace, "
                         f"the plan holds {0 if s.workspace is None else ws.nbytes}")
    with stream:
        conv(*(bufs[b] for b in s.reads), bufs[s.out], ws)


def _alias(s: Alias, fn, bufs: dict, stream) -> None:
    bufs[s.dst] = s.view(bufs[s.src])


def _ptr(a) -> int:
    """The address of a CuPy array's bytes, or of a NumPy array's (a host buffer: pinned memory)."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def _copy(s: Copy, fn, bufs: dict, stream) -> None:
    import cupy

    dst, src = bufs[s.dst], bufs[s.src]
    if dst.nbytes:  # device to device, or cudaMemcpyDefault where one side is a host buffer
        kind = 4 if isinstance(src, np.ndarray) or isinstance(dst, np.ndarray) else 3
        cupy.cuda.runtime.memcpyAsync(_ptr(dst), _ptr(src), dst.nbytes, kind, stream.ptr)


def _host_copy(s: HostCopy, fn, bufs: dict, stream) -> None:
    """An offloaded activation between a device buffer (a CuPy array) and its host buffer (a NumPy
    array in pinned memory): one cudaMemcpyAsync, on the host-copy stream when overlapped (_fork),
    finished by the matching Wait."""
    import cupy

    src, dst = bufs[s.src], bufs[s.out]
    if not dst.nbytes:
        return
    on, done = _fork(stream, "host", s.out, s.op) if s.overlap else (stream, None)
    # cudaMemcpyDefault: the direction from the addresses (a host op of a graph input copies device to device)
    cupy.cuda.runtime.memcpyAsync(_ptr(dst), _ptr(src), dst.nbytes, 4, on.ptr)
    if done is not None:
        done.record(on)


STEP_HANDLERS: dict[type, Callable] = {KernelLaunch: _kernel, MatmulCall: _matmul, AttentionCall: _attention,
                                       ConvCall: _conv, CollectiveCall: _collective, Wait: _wait,
                                       Alias: _alias, Copy: _copy, HostCopy: _host_copy}
Program = list[tuple[Callable, object, Step]]


# what a step needs before its first run, made when the plan is prepared (a library's graph: cuDNN's are
# built or read back from the cache of built graphs then, runtime/cudnn_cache.py, not inside the first step)
STEP_GRAPHS: dict[type, Callable] = {AttentionCall: _attention_graph, ConvCall: _conv_graph}


def prepare(steps: Sequence[Step], fns: dict) -> Program:
    """Each step with its handler and its loaded kernel (from load_kernels; None for other steps),
    looked up once so that running the steps costs one call per step; the library graphs the steps
    run are made here (STEP_GRAPHS)."""
    for s in steps:
        if type(s) in STEP_GRAPHS:
            STEP_GRAPHS[type(s)](s)

    def kernel(s: Step):
        return fns[(source_key(s.source), s.name)] if isinstance(s, KernelLaunch) else None

    return [(_side_kernel if isinstance(s, KernelLaunch) and s.side else STEP_HANDLERS[type(s)], kernel(s), s)
            for s in steps]


def run_program(program: Program, bufs: dict, stream) -> None:
    """Issue prepared steps in order on `stream`; bufs maps buffer id -> CuPy array (aliases add theirs)."""
    for handler, fn, s in program:
        handler(s, fn, bufs, stream)
