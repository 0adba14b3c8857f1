"""The CUDA executor: runs a Plan with CuPy (DESIGN.md §4).

compile(graph) builds the Plan, compiles every kernel it names with NVRTC (codegen.nvrtc, whose
on-disk cache makes a restart cheap), loads the cubins, and returns a callable. Each compiled plan
owns one arena (allocated at its first call, poisoned with 0xFF bytes so reads of unwritten memory
show up as NaN); temporaries are views into it. A call binds the inputs, allocates fresh outputs,
and runs the steps in order on the current CuPy stream. Outputs are fresh CuPy arrays (never arena
views), so they stay valid across later calls. One plan's calls must not run concurrently on two
streams: they share the arena.

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from flame.errors import FlameError
from flame.ir.graph import Graph
from flame.runtime.plan import Alias, Copy, KernelLaunch, LibraryCall, Plan, build_plan

_MAX_STATIC_SMEM = 48 * 1024
_ATTR_MAX_DYNAMIC_SMEM = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_LOADED: dict[tuple, object] = {}  # (sha256 of source, kernel name, device id) -> cupy Function (keeps its module)


def _source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _compile_cubins(kernels: Sequence) -> dict[str, bytes]:
    """Compile each distinct source once: sha256 -> cubin (through codegen.nvrtc's cache)."""
    from flame.codegen import nvrtc

    arch = nvrtc.device_arch()
    todo = {}
    for k in kernels:
        todo.setdefault(_source_key(k.source), k)
    if len(todo) > 1:
        return dict(zip(todo, nvrtc.compile_many([k.source for k in todo.values()], arch)))
    return {key: nvrtc.compile_cubin(k.source, arch, name_hint=k.name) for key, k in todo.items()}


def load_kernels(kernels: Sequence[KernelLaunch]) -> dict[tuple[str, str], object]:
    """A loaded cupy Function per (source sha256, kernel name); compiles what is not loaded yet."""
    import cupy

    dev = cupy.cuda.Device().id
    missing = [k for k in kernels if (_source_key(k.source), k.name, dev) not in _LOADED]
    cubins = _compile_cubins(missing) if missing else {}
    for k in missing:
        key = (_source_key(k.source), k.name, dev)
        if key in _LOADED:
            continue
        mod = cupy.cuda.function.Module()
        mod.load(cubins[key[0]])
        _LOADED[key] = mod.get_function(k.name)
    out = {}
    for k in kernels:
        fn = _LOADED[(_source_key(k.source), k.name, dev)]
        if k.smem > _MAX_STATIC_SMEM:
            cupy.cuda.driver.funcSetAttribute(fn.ptr, _ATTR_MAX_DYNAMIC_SMEM, k.smem)
        out[(_source_key(k.source), k.name)] = fn
    return out


class CompiledPlan:
    """A Plan with its kernels loaded; call it with CuPy arrays (one per graph input)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        fns = load_kernels(plan.kernels())
        self._program = [self._prepare(s, fns) for s in plan.steps]
        self._arena = None
        self._views: dict[int, object] = {}
        self._types = [(plan.buffers[b].shape, plan.buffers[b].dtype.np_dtype) for b in plan.inputs]
        self._fresh = [b for b in plan.buffers.values() if b.role == "output" and b.base is None]

    @staticmethod
    def _prepare(s, fns):
        if isinstance(s, KernelLaunch):
            return ("launch", fns[(_source_key(s.source), s.name)], s)
        kinds = {LibraryCall: "librarycall", Alias: "alias", Copy: "copy"}
        return (kinds[type(s)], None, s)

    def _bind_arena(self):
        import cupy

        self._arena = cupy.full(max(self.plan.arena_size, 1), 0xFF, dtype=cupy.uint8)
        for b in self.plan.buffers.values():
            if b.role in ("temporary", "scratch"):
                raw = self._arena[b.offset: b.offset + b.nbytes]
                self._views[b.id] = raw.view(b.dtype.np_dtype).reshape(b.shape)

    def _inputs(self, arrays: Sequence) -> list:
        import cupy

        plan = self.plan
        if len(arrays) != len(self._types):
            raise FlameError(f"graph {plan.name} takes {len(self._types)} inputs, got {len(arrays)}")
        out = []
        for i, (a, (shape, dt)) in enumerate(zip(arrays, self._types)):
            a = a if isinstance(a, cupy.ndarray) else cupy.asarray(np.asarray(a))
            if tuple(a.shape) != shape or a.dtype != dt:
                raise FlameError(f"graph {plan.name}: input {i} should be {dt}{list(shape)}, got "
                                 f"{a.dtype}{list(a.shape)}")
            out.append(cupy.ascontiguousarray(a))
        return out

    def __call__(self, arrays: Sequence) -> list:
        import cupy

        from flame.runtime.matmul import matmul_into

        if self._arena is None:
            self._bind_arena()
        stream = cupy.cuda.get_current_stream()
        bufs = dict(self._views)
        bufs.update(zip(self.plan.inputs, self._inputs(arrays)))
        for b in self._fresh:
            bufs[b.id] = cupy.empty(b.shape, b.dtype.np_dtype)
        for kind, fn, s in self._program:
            if kind == "launch":
                if s.grid > 0:
                    fn((s.grid,), (s.block,), [bufs[a] for a in s.args], shared_mem=s.smem, stream=stream)
            elif kind == "librarycall":
                a, b = bufs[s.args[0]], bufs[s.args[1]]
                matmul_into(bufs[s.out], a, b, ta=s.info["ta"], tb=s.info["tb"], stream=stream)
            elif kind == "alias":
                bufs[s.dst] = bufs[s.src].reshape(self.plan.buffers[s.dst].shape)
            else:
                dst, src = bufs[s.dst], bufs[s.src]
                if dst.nbytes:
                    cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, dst.nbytes, 3, stream.ptr)
        return [bufs[o] for o in self.plan.outputs]


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

    def compile(self, g: Graph) -> CompiledPlan:
        return CompiledPlan(build_plan(g))
