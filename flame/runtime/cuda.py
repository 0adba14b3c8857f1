"""The CUDA executor: runs a Plan with CuPy (ARCHITECTURE.md "Plans are data").

compile(graph) builds the Plan, compiles every kernel it names with NVRTC (codegen.nvrtc, whose
on-disk cache makes a restart cheap), loads the cubins, and returns a callable. Temporaries are
views into an arena (`Arena`: allocated at the first call, poisoned with 0xFF bytes so reads of
unwritten memory show up as NaN). A compiled plan owns its arena, or shares one with the other plans
of the same compiled function (`compile(plan, arena)`: @flame.compile's traces and batch sizes run
one at a time, so they hold the largest one's arena, not one each). A call binds the inputs,
allocates fresh outputs, and runs the steps in order on the current CuPy stream. Outputs are fresh
CuPy arrays (never arena views), so they stay valid across later calls. An output aliased to an
input (plan.memory) is the input array itself, updated in place. The calls of the plans sharing an
arena never run concurrently: a call on another stream than the last call's waits for that stream
first.

Its parts, each a module of runtime/: `cuda_kernels` compiles and loads the kernels (`source_key`,
`load_kernels`), `cuda_steps` is the `{step type: handler}` table that turns a step into GPU work
(`prepare`, `run_program`), `cuda_streams` holds the per-device streams and events overlapped steps
and captures use, and `cuda_graphs` decides when a plan replays as a CUDA graph and captures and
replays it with its output slabs (`GraphReplay`, which CompiledPlan is).

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from flame._env import env_flag
from flame._lists import alive_same, all_same, gather
from flame.errors import FlameError
from flame.plan.steps import Plan
from flame.runtime.cuda_graphs import GraphReplay, graphs_pay_off, graphs_setting
from flame.runtime.cuda_kernels import load_kernels
from flame.runtime.cuda_steps import cupy_dtype, cupy_storage, prepare, run_program

log = logging.getLogger("flame")


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


class Arena:
    """The device memory the plans of one compiled function share for their temporaries and kernel
    scratch (a plan compiled without one has its own). Those plans run one at a time (a call waits for
    the last call's stream, `last_stream`), and no temporary lives from one call to the next, so one
    buffer the size of the largest plan's arena serves them all: a training step's first plan (no
    .grad yet) and its steady one, or the plans of every batch size, hold one arena between them.

    A plan binds the buffer at its first call (`bind`). A plan larger than the buffer grows it: the
    plans bound to the smaller buffer let go of their views of it and of the CUDA graphs captured on
    it (they bind again at their next call), and it is freed before the larger one is allocated, so
    the two are never held at once."""

    def __init__(self):
        self.buffer = None
        self.last_stream = None  # the stream of the last call of a plan sharing this arena
        self._bound: weakref.WeakSet = weakref.WeakSet()  # the CompiledPlans holding views of the buffer

    @property
    def nbytes(self) -> int:
        return 0 if self.buffer is None else int(self.buffer.nbytes)

    def bind(self, user: CompiledPlan, nbytes: int):
        """The buffer, at least nbytes long (grown as the class docstring says), with `user` bound to it."""
        import cupy

        if self.buffer is None or nbytes > self.nbytes:
            for other in list(self._bound):
                other._unbind()
            self._bound.clear()
            self.buffer = None  # freed before the larger one is made
            self.buffer = cupy.full(max(nbytes, 1), 0xFF, dtype=cupy.uint8)
        self._bound.add(user)
        return self.buffer


class CompiledPlan(GraphReplay):
    """A Plan with its kernels loaded; call it with CuPy arrays (one per graph input). arena: the Arena
    it shares with the other plans of its compiled function (None: one of its own)."""

    def __init__(self, plan: Plan, arena: Arena | None = None):
        self.plan = plan
        fns = load_kernels(plan.kernels())
        self._program = prepare(plan.steps, fns)
        self._shared = Arena() if arena is None else arena
        self._arena = None  # the buffer bound (the shared arena's, or under the sanitizer a dummy)
        self._temps = [b for b in plan.buffers.values() if b.role in ("temporary", "scratch")]
        self._views: dict[int, object] = {}
        self._types = [(plan.buffers[b].shape, cupy_dtype(plan.buffers[b].dtype)) for b in plan.inputs]
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
        # input pointers (_key) -> {output slab slot -> graph}, most recently replayed last
        self._graphs: OrderedDict = OrderedDict()
        self._keys_seen: OrderedDict = OrderedDict()  # the input pointers of recent calls, most recent last

    def _bind_arena(self):
        import cupy

        separate = sanitizing()
        if separate:
            self._arena = cupy.full(1, 0xFF, dtype=cupy.uint8)
        else:
            self._arena = self._shared.bind(self, self.plan.arena_size)
        for b in self.plan.buffers.values():
            if b.role == "host" and b.id not in self._views:
                # an offloaded activation: pinned host memory (runtime/cuda_steps._host_copy), kept
                import cupyx

                self._views[b.id] = cupyx.empty_pinned(b.shape, cupy_dtype(b.dtype))
        for b in self._temps:
            # under the sanitizer every buffer is its own allocation, so an access past it is caught;
            # one array per buffer, made in one call (a first call at a new size makes dozens)
            at = cupy.full(b.nbytes, 0xFF, dtype=cupy.uint8).data if separate else self._arena.data + b.offset
            self._views[b.id] = cupy.ndarray(b.shape, cupy_dtype(b.dtype), at)

    def _unbind(self):
        """Let go of the shared arena's buffer (Arena.bind is growing it): the views into it and the
        CUDA graphs captured on it; the next call binds again."""
        self._arena = None
        for b in self._temps:
            self._views.pop(b.id, None)
        self._graphs.clear()

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
        a = a if isinstance(a, cupy.ndarray) else cupy.asarray(cupy_storage(np.asarray(a)))
        if tuple(a.shape) != shape or a.dtype != dt:
            raise FlameError(f"graph {self.plan.name}: input {i} should be {dt}{list(shape)}, got "
                             f"{a.dtype}{list(a.shape)}")
        return a if a.flags.c_contiguous else cupy.ascontiguousarray(a)

    def __call__(self, arrays: Sequence) -> list:
        import cupy

        arrays = self._inputs(arrays)
        stream = self._follow_stream()
        if self._arena is None:
            self._bind_arena()
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
            bufs[b.id] = cupy.empty(b.shape, cupy_dtype(b.dtype))
        run_program(self._program, bufs, stream)
        return [bufs[o] for o in self.plan.outputs]

    def _follow_stream(self):
        """The caller's current stream, which this call runs on. A call on another stream than the last
        one waits for everything queued on that one so far: the calls of the plans sharing the arena
        share it, and this plan's calls its stage buffers and output slabs (an event only when the
        stream changes)."""
        import cupy

        stream = cupy.cuda.get_current_stream()
        last = self._shared.last_stream
        if last is not None and last.ptr != stream.ptr:
            done = cupy.cuda.Event(disable_timing=True)
            done.record(last)
            stream.wait_event(done)
        self._shared.last_stream = stream
        return stream


class CudaExecutor:
    """Executor interface (shared with runtime.reference) on CuPy arrays."""

    name = "cuda"

    def asarray(self, data, dtype=None):
        import cupy

        return cupy.asarray(cupy_storage(np.asarray(data, dtype=dtype)))

    def to_numpy(self, a, dtype=None) -> np.ndarray:
        """a on the host; dtype (an IR DType): the tensor's, so FP8 bytes read back as FP8 (cupy_dtype)."""
        import cupy

        out = cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else np.asarray(a)
        return out.view(dtype.np_dtype) if dtype is not None and dtype.is_float8 and out.dtype == np.uint8 else out

    def from_dlpack(self, obj):
        """Zero-copy: the result shares memory with obj."""
        import cupy

        return cupy.from_dlpack(obj)

    def arena(self) -> Arena:
        """An arena for the plans of one compiled function to share (compile's `arena`)."""
        return Arena()

    def compile(self, plan: Plan, arena: Arena | None = None) -> CompiledPlan:
        """Load the (memory-planned) Plan's kernels; the result runs it on CuPy arrays, its temporaries
        in `arena` (shared with the other plans compiled with it) or in one of its own."""
        return CompiledPlan(plan, arena)
