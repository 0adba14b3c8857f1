"""The CUDA executor: runs a Plan with CuPy (ARCHITECTURE.md "Plans are data").

compile(graph) builds the Plan, compiles every kernel it names with NVRTC (codegen.nvrtc, whose
on-disk cache makes a restart cheap), loads the cubins, and returns a callable. Each compiled plan
owns one arena (allocated at its first call, poisoned with 0xFF bytes so reads of unwritten memory
show up as NaN); temporaries are views into it. A call binds the inputs, allocates fresh outputs,
and runs the steps in order on the current CuPy stream. Outputs are fresh CuPy arrays (never arena
views), so they stay valid across later calls. An output aliased to an input (plan.memory) is the
input array itself, updated in place. One plan's calls never run concurrently (they share the
arena): a call on another stream than the last call's waits for that stream first.

CUDA graphs (ARCHITECTURE.md "CUDA graphs"): the first call runs the steps as plain launches; the second captures the
whole plan once on a non-default stream (cuBLASLt through nvmath on that same stream),
later calls replay it. Inputs: parameters, state, constants, in-place-updated inputs and data inputs
are captured by pointer (in-place updates must land in the caller's arrays). When data inputs of at
most STAGE_BYTES in all arrive at other addresses (a new batch), they are staged from then on:
copied into fixed buffers before each replay (where that costs less than the launches it saves),
one graph again. Larger ones (a 256 MB tensor to reduce, attention's q, k, v) would cost a copy
each call: at addresses no graph has, the call runs plain launches, and when those addresses come
back they get a graph of their own, up to GRAPH_VARIANTS per plan (the least recently replayed
goes), so double-buffered inputs replay without copies. Scalar inputs, a new array at every call,
are staged from the start. Outputs (those not updated in place) live in an output slab whose
disjoint views a call returns; each slab has its own graph. The caller gets a slab's views only
while nothing outside flame still holds the views of an earlier call from it (its memory's reference
count says so), so in a loop (`loss = step(x)` holds the last call's outputs while the next call
runs) two slabs take turns and nothing is copied. When the caller holds every slab (a list of every
call's outputs), another slab (and graph) is made, as an allocator would hand out fresh memory, up to
OUTPUT_SLABS slabs and OUTPUT_SLAB_BYTES in all per plan; past that the graph writes an internal slab
that is copied into a fresh one (one allocation, one memcpy: a copy costs the GPU microseconds even
for a scalar, and bandwidth for a large output). A free slab that already has a graph for the call's
input pointers is taken first, so a few input sets in turn do not capture a graph per slab each.
Graph launches go on the caller's current stream. A plan that cannot be captured runs plain launches
and says why at debug level; FLAME_CUDA_GRAPHS=0 disables.

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from flame._env import env_choice, env_flag
from flame._lists import alive_same, all_same, gather
from flame.errors import FlameError
from flame.plan.steps import (
    Alias,
    AttentionCall,
    CollectiveCall,
    ConvCall,
    Copy,
    KernelLaunch,
    MatmulCall,
    Plan,
    Step,
    Wait,
    aligned,
    byte_offset,
)
from flame.runtime.communicator import run_collective
from flame.runtime.matmul import run_matmul

log = logging.getLogger("flame")
_MAX_STATIC_SMEM = 48 * 1024
_ATTR_MAX_DYNAMIC_SMEM = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_LOADED: dict[tuple, object] = {}  # (sha256 of source, kernel name, device id) -> cupy Function (keeps its module)


@functools.lru_cache(maxsize=8192)
def source_key(source: str) -> str:
    """sha256 of a kernel's source, once per source: every size of a dynamic dim plans the same
    source objects (flame.plan.instance), and a str keeps its hash, so a repeat costs a lookup."""
    return hashlib.sha256(source.encode()).hexdigest()


def _compile_cubins(kernels: Sequence) -> dict[str, bytes]:
    """Compile each distinct source once: sha256 -> cubin (through codegen.nvrtc's cache)."""
    from flame.codegen import nvrtc

    arch = nvrtc.device_arch()
    todo = {}
    for k in kernels:
        todo.setdefault(source_key(k.source), k)
    if len(todo) > 1:
        return dict(zip(todo, nvrtc.compile_many([k.source for k in todo.values()], arch)))
    return {key: nvrtc.compile_cubin(k.source, arch, name_hint=k.name) for key, k in todo.items()}


def load_kernels(kernels: Sequence[KernelLaunch]) -> dict[tuple[str, str], object]:
    """A loaded cupy Function per (source sha256, kernel name); compiles what is not loaded yet."""
    import cupy

    dev = cupy.cuda.Device().id
    missing = [k for k in kernels if (source_key(k.source), k.name, dev) not in _LOADED]
    cubins = _compile_cubins(missing) if missing else {}
    for k in missing:
        key = (source_key(k.source), k.name, dev)
        if key in _LOADED:
            continue
        mod = cupy.cuda.function.Module()
        mod.load(cubins[key[0]])
        _LOADED[key] = mod.get_function(k.name)
    out = {}
    for k in kernels:
        key = source_key(k.source)
        fn = _LOADED[(key, k.name, dev)]
        if k.smem > _MAX_STATIC_SMEM and _SMEM_SET.get(fn.ptr, 0) < k.smem:
            cupy.cuda.driver.funcSetAttribute(fn.ptr, _ATTR_MAX_DYNAMIC_SMEM, k.smem)
            _SMEM_SET[fn.ptr] = k.smem
        out[(key, k.name)] = fn
    return out


_SMEM_SET: dict[int, int] = {}  # loaded function's pointer -> the dynamic shared memory it was allowed (set once)


# ---- one handler per step type: the one place plan steps become GPU work ---------------------------
# handler(step, loaded kernel or None, buffers (id -> CuPy array), stream); the executor below, and
# `flame check` / `flame profile` (runtime.stepwise), run steps through these.


def _kernel(s: KernelLaunch, fn, bufs: dict, stream) -> None:
    if s.grid > 0:
        sizes = [np.int64(n) for n in s.sizes]  # a dynamic dim's size (flame.ir.symbolic)
        fn((s.grid,), (s.block,), [bufs[a] for a in s.args] + sizes, shared_mem=s.smem, stream=stream)


def _matmul(s: MatmulCall, fn, bufs: dict, stream) -> None:
    run_matmul(s, bufs, stream)


def _attention(s: AttentionCall, fn, bufs: dict, stream) -> None:
    """cuDNN's graphs for the op at the call's layouts (part of the spec, so of the graph cache's key),
    on the operands' strided views of their buffers."""
    import cupy

    from flame.runtime.cudnn_attention import STATS, cudnn_attention, spec_of, workspace_bytes

    att = cudnn_attention(spec_of(s.op, s.layouts))
    need = workspace_bytes(s.op, s.stats_op is not None, exact=True, att=att)
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


_GRAPH_STREAMS: dict[int, object] = {}  # device id -> the stream compiled plans capture their graphs on


def graph_stream():
    """The non-blocking stream every compiled plan on the current device captures its CUDA graphs on
    (a capture needs a stream other than the legacy default one): one per device rather than one per
    plan (each size of a dynamic dim is a plan). Captures only record; the graphs are launched on the
    caller's stream, so they stay ordered with the caller's other work without events."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _GRAPH_STREAMS:
        _GRAPH_STREAMS[dev] = cupy.cuda.Stream(non_blocking=True)
    return _GRAPH_STREAMS[dev]


_STREAMS: dict[tuple[int, str], object] = {}  # (device id, "comm" or "side") -> that stream of this process


def overlap_stream(name: str):
    """The second stream overlapped steps run on, one per device and kind (non-blocking): "comm" for
    collectives, "side" for optimizer updates (separate, so an update never queues behind a transfer)."""
    import cupy

    key = (cupy.cuda.Device().id, name)
    if key not in _STREAMS:
        _STREAMS[key] = cupy.cuda.Stream(non_blocking=True)
    return _STREAMS[key]


def _fork(stream, name: str, out: int, op) -> tuple:
    """Start an overlapped step: the `name` stream waits for everything issued on `stream` so far.
    Returns (that stream, the event its Wait waits for: record it after the step's work); under
    CUDA-graph capture the two events become the graph's fork and join edges."""
    side = overlap_stream(name)
    ready, done = _events(out, op)
    ready.record(stream)
    side.wait_event(ready)
    return side, done


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


_EVENTS: dict[tuple, tuple] = {}  # (device, result buffer, op) -> (ready, done) events of an overlapped step


def _events(out: int, op) -> tuple:
    """The (ready, done) events of an overlapped step (the one writing buffer `out` for `op`), shared
    with its Wait; created at the plan's first (uncaptured) run, so a capture records only edges."""
    import cupy

    key = (cupy.cuda.Device().id, out, op)
    if key not in _EVENTS:
        _EVENTS[key] = (cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True))
    return _EVENTS[key]


def _wait(s: Wait, fn, bufs: dict, stream) -> None:
    stream.wait_event(_events(s.out, s.op)[1])


def _conv(s: ConvCall, fn, bufs: dict, stream) -> None:
    from flame.runtime.cudnn_conv import cudnn_conv, spec_of

    conv = cudnn_conv(spec_of(s.op))
    ws = 0 if s.workspace is None else bufs[s.workspace]
    if conv.workspace > (0 if s.workspace is None else ws.nbytes):
        raise FlameError(f"conv_{s.kind} call for {s.op.name}: cuDNN needs {conv.workspace} bytes of workspace, "
                         f"the plan holds {0 if s.workspace is None else ws.nbytes}")
    with stream:
        conv(*(bufs[b] for b in s.reads), bufs[s.out], ws)


def _alias(s: Alias, fn, bufs: dict, stream) -> None:
    bufs[s.dst] = s.view(bufs[s.src])


def _copy(s: Copy, fn, bufs: dict, stream) -> None:
    import cupy

    dst, src = bufs[s.dst], bufs[s.src]
    if dst.nbytes:
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, dst.nbytes, 3, stream.ptr)


STEP_HANDLERS: dict[type, Callable] = {KernelLaunch: _kernel, MatmulCall: _matmul, AttentionCall: _attention,
                                       ConvCall: _conv, CollectiveCall: _collective, Wait: _wait,
                                       Alias: _alias, Copy: _copy}
Program = list[tuple[Callable, object, Step]]


def prepare(steps: Sequence[Step], fns: dict) -> Program:
    """Each step with its handler and its loaded kernel (from load_kernels; None for other steps),
    looked up once so that running the steps costs one call per step."""

    def kernel(s: Step):
        return fns[(source_key(s.source), s.name)] if isinstance(s, KernelLaunch) else None

    return [(_side_kernel if isinstance(s, KernelLaunch) and s.side else STEP_HANDLERS[type(s)], kernel(s), s)
            for s in steps]


def run_program(program: Program, bufs: dict, stream) -> None:
    """Issue prepared steps in order on `stream`; bufs maps buffer id -> CuPy array (aliases add theirs)."""
    for handler, fn, s in program:
        handler(s, fn, bufs, stream)


LAUNCH_US = 8.0  # a kernel launch from Python costs about this much host time (ARCHITECTURE.md "CUDA graphs")
GRAPH_VARIANTS = 4  # graphs kept per plan, one per set of input pointers (module docstring)
STAGE_BYTES = 1 << 20  # data inputs moved by at most this many bytes in all are staged (module docstring)
OUTPUT_SLABS = 16  # the most output slabs a plan hands out, each with its graph (module docstring) ...
OUTPUT_SLAB_BYTES = 1 << 30  # ... and the most bytes they may hold in all
_INTERNAL = -1  # the slot of the internal output slab, copied out after each replay
COPY_BYTES_PER_US = 2.0e6  # a device copy moves about this many bytes per µs (read + write at ~4 TB/s)


def graphs_setting() -> str:
    """FLAME_CUDA_GRAPHS: "0" never replays CUDA graphs, "1" always does, unset/"auto" decides per plan."""
    return env_choice("FLAME_CUDA_GRAPHS", {"0": "never", "1": "always", "auto": "auto"}, "auto")


# host time of one plain call into a library from Python, counted low: a cuDNN frontend graph's execute
# (variant pack, handle, stream) costs ~150 us on an H100's host (sdpa_fwd_bwd's two attention calls run
# 331 us per call back to back without a graph, 261 us of GPU time: benchmarks/results/2026-11-27-H100-multi-tensor/);
# a cuBLASLt matmul: an estimate
LIBRARY_CALL_US = {AttentionCall: 100.0, ConvCall: 100.0}
LIBRARY_CALL_US_DEFAULT = 30.0


def _host_us(step: Step) -> float:
    """What the step's launches cost the host when run plainly (not replayed)."""
    each = LAUNCH_US if isinstance(step, KernelLaunch) else LIBRARY_CALL_US.get(type(step), LIBRARY_CALL_US_DEFAULT)
    return each * step.launches


def graphs_pay_off(plan: Plan, staged_bytes: int) -> tuple[bool, str]:
    """A replay saves the launches' host time but copies data inputs into fixed buffers and outputs
    out of them; replay only when the copies cost less than half of what the launches cost."""
    launches = sum(s.launches for s in plan.steps)
    copy_us, launch_us = staged_bytes / COPY_BYTES_PER_US, sum(_host_us(s) for s in plan.steps)
    if copy_us < launch_us / 2:
        return True, ""
    return False, (f"copying {staged_bytes} bytes in and out (~{copy_us:.0f} us) would cost more than the "
                   f"{launches} launches it saves (~{launch_us:.0f} us)")


def sanitizing() -> bool:
    """FLAME_SANITIZE=1 (for compute-sanitizer memcheck): every planned buffer is its own cudaMalloc and
    CuPy's pool is off, so an access past any buffer lands outside an allocation and is reported (in
    one arena, or in a pooled chunk, it would hit a neighbour silently). Slow; for checking only."""
    if not env_flag("FLAME_SANITIZE", False):
        return False
    import cupy

    if _POOL_OFF:
        cupy.cuda.set_allocator(None)
        _POOL_OFF.clear()
    return True


def _dead():
    """A weak reference to nothing: no array is the one it remembers."""
    return None


def _weak(a):
    """A weak reference to a, or _dead where a takes none."""
    try:
        return weakref.ref(a)
    except TypeError:
        return _dead


_POOL_OFF = [True]  # turn CuPy's pool off once, the first time a sanitized plan binds its buffers


class CompiledPlan:
    """A Plan with its kernels loaded; call it with CuPy arrays (one per graph input)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        fns = load_kernels(plan.kernels())
        self._program = prepare(plan.steps, fns)
        self._arena = None
        self._views: dict[int, object] = {}
        self._types = [(plan.buffers[b].shape, plan.buffers[b].dtype.np_dtype) for b in plan.inputs]
        self._fresh = [b for b in plan.buffers.values() if b.role == "output" and b.base is None]
        donated = set(plan.outputs) & set(plan.inputs)
        # parameters and state: the arrays the last call checked are remembered (an optimizer's hundreds
        # are then checked by identity in one pass); their owners keep them alive anyway. Other inputs
        # are checked at every call and never held: a remembered batch, or the source of an eager cast,
        # would stay allocated as long as this executor lives.
        held = [j for j, b in enumerate(plan.inputs) if plan.buffers[b].role in ("param", "state")]
        self._held, self._held_set, self._pick_held, self._seen = held, set(held), gather(held), (None,) * len(held)
        self._unheld = [j for j in range(len(plan.inputs)) if j not in self._held_set]
        # ... and the other inputs' arrays weakly: the objects the last call checked skip the check (a
        # gradient passed again, a scalar whose value did not change), and their pointers are the same.
        # Scalars apart: a step count's is new at every call, and should not send the rest through
        # the slow path.
        scalar = {j for j, b in enumerate(plan.inputs) if plan.buffers[b].role == "scalar"}
        self._unheld_groups = [(gather(js), js, [_dead] * len(js))
                               for js in ([j for j in self._unheld if j not in scalar],
                                          [j for j in self._unheld if j in scalar]) if js]
        # bumped whenever an input bound by pointer is not the array of the last call (_key reads the
        # pointers again only then)
        self._input_changes = 0
        self._donated = {j for j, b in enumerate(plan.inputs) if b in donated}
        # scalars are staged from the start (a Python number arrives in a new array each call); data
        # inputs are bound by pointer until one arrives at another address (a new batch), then staged
        self._set_staged({j for j, b in enumerate(plan.inputs)
                          if plan.buffers[b].role == "scalar" and j not in self._donated})
        self._setting = graphs_setting()
        self.use_graphs, self.why_no_graph = {"never": (False, "FLAME_CUDA_GRAPHS=0"), "always": (True, "")}.get(
            self._setting) or graphs_pay_off(plan, self._staged_bytes())
        if not self.use_graphs:
            log.debug("flame: %s runs without a CUDA graph: %s", plan.name, self.why_no_graph)
        self.captures = 0  # how many times the plan was captured (new input pointers capture again)
        self._scalars = {j for j, b in enumerate(plan.inputs) if plan.buffers[b].role == "scalar"}
        self._staged_from: dict[int, object] = {}  # scalar input -> the array last copied into its stage
        self._calls = 0
        self._last_stream = None  # the stream of the last call (_follow_stream)
        # input pointers (_key) -> {output slab slot -> graph}, most recently replayed last
        self._graphs: OrderedDict = OrderedDict()
        self._keys_seen: OrderedDict = OrderedDict()  # the input pointers of recent calls, most recent last

    def _bind_arena(self):
        import cupy

        separate = sanitizing()
        self._arena = cupy.full(1 if separate else max(self.plan.arena_size, 1), 0xFF, dtype=cupy.uint8)
        for b in self.plan.buffers.values():
            if b.role in ("temporary", "scratch"):
                # under the sanitizer every buffer is its own allocation, so an access past it is caught;
                # one array per buffer, made in one call (a first call at a new size makes dozens)
                at = cupy.full(b.nbytes, 0xFF, dtype=cupy.uint8).data if separate else self._arena.data + b.offset
                self._views[b.id] = cupy.ndarray(b.shape, b.dtype.np_dtype, at)

    def _inputs(self, arrays: Sequence) -> list:
        plan = self.plan
        out = list(arrays)
        if len(out) != len(self._types):
            raise FlameError(f"graph {plan.name} takes {len(self._types)} inputs, got {len(out)}")
        if not all_same(self._pick_held(out), self._seen):
            for j in self._held:
                out[j] = self._checked(out[j], j)
            self._seen = self._pick_held(out)
            self._input_changes += 1
        for pick, js, refs in self._unheld_groups:
            if not alive_same(refs, pick(out)):
                self._check_unheld(out, js, refs)
        return out

    def _check_unheld(self, out: list, js: list, refs: list) -> None:
        """_inputs for the other inputs js that are not the arrays the last call checked: checked (or
        converted: a NumPy array, a strided view) and remembered weakly in refs."""
        for k, j in enumerate(js):
            a = out[j]
            if refs[k]() is not a:
                out[j] = self._checked(a, j)
                refs[k] = _weak(a) if out[j] is a else _dead
                if j not in self._staged:
                    self._input_changes += 1

    def _checked(self, a, i: int):
        """Input i as a C-contiguous CuPy array of the planned shape and dtype (FlameError if not)."""
        import cupy

        shape, dt = self._types[i]
        if isinstance(a, cupy.ndarray) and a.flags.c_contiguous and tuple(a.shape) == shape and a.dtype == dt:
            return a
        a = a if isinstance(a, cupy.ndarray) else cupy.asarray(np.asarray(a))
        if tuple(a.shape) != shape or a.dtype != dt:
            raise FlameError(f"graph {self.plan.name}: input {i} should be {dt}{list(shape)}, got "
                             f"{a.dtype}{list(a.shape)}")
        return a if a.flags.c_contiguous else cupy.ascontiguousarray(a)

    def __call__(self, arrays: Sequence) -> list:
        import cupy

        if self._arena is None:
            self._bind_arena()
        arrays = self._inputs(arrays)
        stream = self._follow_stream()
        if self.use_graphs and self._calls > 0:
            out = self._replay(arrays, stream)
            if out is not None:
                return out
        if self.use_graphs and not self._calls:
            self._remember(self._key(arrays))
        self._calls += 1
        bufs = dict(self._views)
        bufs.update(zip(self.plan.inputs, arrays))
        for b in self._fresh:
            bufs[b.id] = cupy.empty(b.shape, b.dtype.np_dtype)
        run_program(self._program, bufs, stream)
        return [bufs[o] for o in self.plan.outputs]

    def _follow_stream(self):
        """The caller's current stream, which this call runs on. A call on another stream than the last
        one waits for everything queued on that one so far: the calls share the arena, the stage
        buffers and the output slabs (an event only when the stream changes)."""
        import cupy

        stream = cupy.cuda.get_current_stream()
        last = self._last_stream
        if last is not None and last.ptr != stream.ptr:
            done = cupy.cuda.Event(disable_timing=True)
            done.record(last)
            stream.wait_event(done)
        self._last_stream = stream
        return stream

    # ---- CUDA graphs ------------------------------------------------------------------------------

    def _setup_graph_buffers(self) -> None:
        plan = self.plan
        self._stream = graph_stream()
        self._stage: dict = {}  # staged input -> its fixed buffer, made when the input is first staged
        self._slab_at, size = {}, 0
        for b in self._fresh:
            self._slab_at[b.id] = size
            size += aligned(b.nbytes)
        self._slab_size = size
        # output slabs (slot -> the slab and its memory's reference count while flame alone holds it)
        self._slabs: dict[int, tuple] = {}
        # per plan output: (its input position, or -1 and where its bytes are in the slab: a replay's result)
        position = {bid: j for j, bid in enumerate(plan.inputs)}
        self._out_at = [(position[o], 0, 0, None, ()) if o in position else (-1, *self._slab_place(o))
                        for o in plan.outputs]
        # a replay's results: the inputs updated in place (picked in one C call), and the slab's views
        self._in_place = [(k, j) for k, (j, *_) in enumerate(self._out_at) if j >= 0]
        self._take_outputs = gather([j for _, j in self._in_place])
        self._slab_outs = [(k, *rest) for k, (j, *rest) in enumerate(self._out_at) if j < 0]

    def _staged_bytes(self) -> int:
        """What a replay may copy: the staged inputs in, the fresh outputs out (only while the caller
        holds every output slab, but the policy counts that worst case: a plan worth replaying only
        because its outputs are not copied is not worth two slabs of them either)."""
        return sum(self.plan.buffers[self.plan.inputs[j]].nbytes for j in self._staged) + \
            sum(b.nbytes for b in self._fresh)

    def _stage_of(self, j: int):
        """The fixed buffer the graph reads staged input j from. Only staged inputs get one: parameters
        and state are bound by pointer, and a copy of each would double their memory."""
        import cupy

        if j not in self._stage:
            self._stage[j] = cupy.empty(*self._types[j])
        return self._stage[j]

    def _slab_place(self, bid: int) -> tuple:
        """(byte offset, bytes, dtype, shape) of an output's bytes in the slab."""
        b = self.plan.buffers[bid]
        return self._slab_at[self.plan.root(bid).id] + byte_offset(self.plan.buffers, bid), b.nbytes, \
            b.dtype.np_dtype, b.shape

    def _slab_view(self, slab, bid: int):
        at, n, dt, shape = self._slab_place(bid)
        return slab[at: at + n].view(dt).reshape(shape)

    def _slab_of(self, slot: int):
        """The output slab of `slot`, allocated on first use."""
        import cupy

        if slot not in self._slabs:
            slab = cupy.empty(max(self._slab_size, 1), cupy.uint8)
            self._slabs[slot] = (slab, sys.getrefcount(slab.data.mem))
        return self._slabs[slot][0]

    def _free_slot(self, graphs: dict) -> int:
        """A slab slot whose earlier outputs nobody outside flame holds any more, one with a graph in
        `graphs` (this call's input pointers) first; a new slot when the caller holds them all (module
        docstring: within OUTPUT_SLABS and OUTPUT_SLAB_BYTES); else _INTERNAL. Views of a slab hold
        its memory, so its reference count is back to what it was when the slab was made exactly when
        they are all gone."""
        if not self._slab_size:
            return _INTERNAL
        free = [slot for slot, (slab, alone) in self._slabs.items()
                if slot != _INTERNAL and sys.getrefcount(slab.data.mem) <= alone]
        for slot in free:
            if slot in graphs:
                return slot
        if free:
            return free[0]
        made = len(self._slabs) - (_INTERNAL in self._slabs)
        if made < OUTPUT_SLABS and (made + 1) * self._slab_size <= OUTPUT_SLAB_BYTES:
            return made
        return _INTERNAL

    def _key(self, arrays: list) -> tuple:
        """The pointers of the inputs bound by pointer (those not staged), in `_bound` order: the last
        call's key unless _inputs saw an input that is not the array of the last call (an array's
        pointer never changes). Then parameters' and state's pointers are read again only if one of
        them changed (their owners keep them alive, and _keyed holds them), the others' always (they
        are remembered weakly: holding them would keep a batch allocated)."""
        memo = self._key_memo
        if memo is not None and memo[0] == self._input_changes:  # every input is the array keyed last
            return memo[1]
        held = self._take_held_bound(arrays)
        if self._keyed is None or not all_same(held, self._keyed[0]):
            ptrs = list(self._keyed[1]) if self._keyed is not None else [0] * len(self._bound)
            for at, a in zip(self._held_at, held):
                ptrs[at] = a.data.ptr
            self._keyed = (held, ptrs)
        ptrs = list(self._keyed[1])
        for at, j in self._unheld_at:
            ptrs[at] = arrays[j].data.ptr
        key = tuple(ptrs)
        self._key_memo = (self._input_changes, key)
        return key

    def _remember(self, key: tuple) -> bool:
        """Note the pointers of a call; whether they were among the last 2 * GRAPH_VARIANTS calls' pointers."""
        seen = key in self._keys_seen
        self._keys_seen[key] = None
        self._keys_seen.move_to_end(key)
        while len(self._keys_seen) > 2 * GRAPH_VARIANTS:
            self._keys_seen.popitem(last=False)
        return seen

    def _set_staged(self, staged: set) -> None:
        self._staged = staged
        self._bound = [j for j in range(len(self.plan.inputs)) if j not in staged]
        self._held_at = [at for at, j in enumerate(self._bound) if j in self._held_set]
        self._take_held_bound = gather([self._bound[at] for at in self._held_at])
        self._unheld_at = [(at, j) for at, j in enumerate(self._bound) if j not in self._held_set]
        self._keyed: tuple | None = None  # (the held bound arrays _key last read, every bound pointer)
        self._key_memo: tuple | None = None  # (_input_changes, the key) of the last _key

    def _capture(self, arrays: list, slot: int) -> None:
        plan = self.plan
        bufs = dict(self._views)
        for j, (bid, a) in enumerate(zip(plan.inputs, arrays)):
            bufs[bid] = self._stage_of(j) if j in self._staged else a
        slab = self._slab_of(slot)
        for b in self._fresh:
            bufs[b.id] = self._slab_view(slab, b.id)
        stream = self._stream
        graph, err = None, None
        with stream:
            stream.begin_capture()
            try:
                run_program(self._program, bufs, stream)
            except Exception as e:  # noqa: BLE001 - any failure means: no graph, plain launches
                err = e
            finally:
                try:
                    graph = stream.end_capture()
                except Exception as e:  # noqa: BLE001
                    err = err or e
        if err is not None:
            raise err
        self._graphs.setdefault(self._key(arrays), {})[slot] = graph
        self.captures += 1

    def _replay(self, arrays: list, stream) -> list | None:
        """Run the captured graph on `stream`, the caller's (capturing first when needed); None: run
        plain launches instead."""
        import cupy

        if self.captures == 0:
            self._setup_graph_buffers()
        key = self._key(arrays)
        graphs = self._graphs.get(key)
        if graphs is None:
            # the pointers of the graph replayed last, else of the call before (the first capture
            # stages a batch that already moved since the first call, instead of capturing twice)
            last = next(reversed(self._graphs if self._graphs else self._keys_seen), None)
            recurring = self._remember(key)
            moved = [] if last is None else [j for j, ptr in zip(self._bound, last)
                                             if arrays[j].data.ptr != ptr and j not in self._donated]
            if moved and sum(arrays[j].nbytes for j in moved) <= STAGE_BYTES:
                # small data inputs at new addresses (a batch): copied into fixed buffers from now on
                self._set_staged(self._staged | set(moved))
                self._graphs.clear()
                self._keys_seen.clear()
                log.debug("flame: re-capturing %s: inputs %s moved (staged from now on)", self.plan.name, moved)
                if self._setting != "always":  # staging them may cost more than the launches save
                    self.use_graphs, self.why_no_graph = graphs_pay_off(self.plan, self._staged_bytes())
                    if not self.use_graphs:
                        log.debug("flame: %s runs without a CUDA graph from now on: %s", self.plan.name,
                                  self.why_no_graph)
                        return None
            elif not recurring and (self._graphs or moved):  # large inputs (or parameters) at new addresses
                log.debug("flame: %s: inputs at addresses no graph has (%s moved): plain launches, a graph "
                          "if they come back", self.plan.name, moved or "parameters")
                return None
            elif len(self._graphs) >= GRAPH_VARIANTS:
                self._graphs.popitem(last=False)  # the least recently replayed goes
        else:
            self._graphs.move_to_end(key)
        slot = self._free_slot(graphs or {})
        graph = (graphs or {}).get(slot)
        if graph is None:
            try:
                self._capture(arrays, slot)
            except Exception as e:  # noqa: BLE001
                self.use_graphs, self.why_no_graph = False, f"{type(e).__name__}: {e}"
                self._graphs.clear()
                log.debug("flame: %s runs without a CUDA graph: %s", self.plan.name, self.why_no_graph)
                return None
            graph = self._graphs[self._key(arrays)][slot]
        # launched on the caller's stream (captured on the graph stream: a capture needs a stream of
        # its own, a launch does not): no events between streams, whose waits cost the GPU microseconds
        for j in self._staged:
            dst, src = self._stage_of(j), arrays[j]
            if j in self._scalars:  # scalar arrays are never written: the same one means the same value
                if self._staged_from.get(j) is src:
                    continue
                self._staged_from[j] = src
            if dst.nbytes:
                cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, dst.nbytes, 3, stream.ptr)
        graph.launch(stream)
        if not self._slab_outs:
            return list(self._take_outputs(arrays))
        out = self._slab_of(slot)
        if slot == _INTERNAL and self._slab_size:  # the caller holds every slab: a copy of the internal one
            internal, out = out, cupy.empty(self._slab_size, cupy.uint8)
            cupy.cuda.runtime.memcpyAsync(out.data.ptr, internal.data.ptr, self._slab_size, 3, stream.ptr)
        results = [None] * len(self._out_at)
        for (k, _), a in zip(self._in_place, self._take_outputs(arrays)):
            results[k] = a
        for k, at, n, dt, shape in self._slab_outs:
            results[k] = out[at: at + n].view(dt).reshape(shape)
        return results


class CudaExecutor:
    """Executor interface (shared with runtime.reference) on CuPy arrays."""

    name = "cuda"

    def asarray(self, data, dtype=None):
        import cupy

        return cupy.asarray(np.asarray(data, dtype=dtype))

    def to_numpy(self, a) -> np.ndarray:
        import cupy

        return cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else np.asarray(a)

    def from_dlpack(self, obj):
        """Zero-copy: the result shares memory with obj."""
        import cupy

        return cupy.from_dlpack(obj)

    def compile(self, plan: Plan) -> CompiledPlan:
        """Load the (memory-planned) Plan's kernels; the result runs it on CuPy arrays."""
        return CompiledPlan(plan)
