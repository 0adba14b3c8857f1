"""flame.cuda: torch.cuda's everyday names over flame's GPU executor (CuPy).

`is_available()` and `device_count()` answer on any machine (False and 0 where no usable GPU is
found, as torch's do), so the usual device-selection line works unchanged:

    device = "cuda" if flame.cuda.is_available() else "cpu"

The rest needs a GPU and raises torch's kind of error (a RuntimeError saying so) without one.
Memory figures come from CuPy's memory pool, the allocator flame's GPU executor draws every array,
arena and library workspace from: `memory_allocated()` is the pool's bytes in use;
`max_memory_allocated()` the peak of that since `reset_peak_memory_stats()` (or since the first
memory-statistics call of the process: the peak is counted by a pool hook installed then).
`Event` and `Stream` wrap CuPy's; flame's compiled steps run on the current stream, so
`with flame.cuda.stream(s):` places them on s.

`kernel(...)` and `elementwise(...)` make an op of the user's own CUDA code (docs/writing_an_op.md,
"Your own CUDA kernel"); they work on any machine (the reference executor runs the user's NumPy
reference).

`flame.cuda.amp` holds torch.cuda.amp's GradScaler and autocast (flame/amp/cuda_amp.py)."""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from flame.amp import cuda_amp as amp
from flame.errors import ArgumentError
from flame.frontend import creation as _creation
from flame.frontend.creation import manual_seed as _manual_seed
from flame.frontend.tensor import Tensor
from flame.frontend.user_ops import UserOp, definition_site, tensor_vjp
from flame.ir.ops import user as _user
from flame.runtime.device import cuda_available

sys.modules.setdefault("flame.cuda.amp", amp)  # `from flame.cuda.amp import GradScaler`, as torch.cuda.amp

__all__ = ["Event", "Stream", "current_device", "current_stream", "device_count", "elementwise", "get_device_name",
           "get_rng_state", "get_rng_state_all", "initial_seed", "is_available", "kernel", "manual_seed",
           "manual_seed_all", "max_memory_allocated", "memory_allocated", "memory_reserved", "reset_peak_memory_stats",
           "seed", "seed_all", "set_rng_state", "set_rng_state_all", "stream", "synchronize"]


def kernel(source: str, *, name: str, reference: Callable, out: Any = None, grid: Callable | None = None,
           vjp: Callable | None = None, inputs: Sequence[str] | None = None) -> UserOp:
    """An op running the user's CUDA kernel. `source` is the body of a `__global__` function whose
    parameters are the inputs, `const T* <name>` (named as `reference`'s parameters, or `inputs`), then
    `T* out`; in it, `<name>_t` is a parameter's element type, `<name>_numel` its element count and
    `<name>_shape[d]` its sizes (constants). `out`: the output type, as a function of the inputs'
    TensorTypes (`.shape`, `.dtype`, `.numel`) giving a TensorType or `(shape, dtype)`, or that fixed,
    or None (the first input's type). `grid(*input types, out type) -> (blocks, threads)`, a 1-D launch
    (None: one thread per output element, 256 per block). `reference`: the NumPy function of the input
    arrays giving the output array (required: the reference executor runs it). `vjp(grad, *inputs,
    out)`: one gradient Tensor (or None) per input, written with flame ops (other user ops included);
    without it, a gradient through the op raises. Returns the op as a function of Tensors, eager and
    inside @flame.compile."""
    where = definition_site()
    params = _param_names("kernel", name, reference, inputs, where)
    what = _user.describe("kernel", name, where)
    opdef = _user.define_kernel(name, source, params, out, reference, _vjp(vjp, what), grid, where)
    return UserOp(opdef.name)


def elementwise(expr: str, *, name: str, reference: Callable, vjp: Callable | None = None,
                inputs: Sequence[str] | None = None) -> UserOp:
    """An elementwise op computing the CUDA expression `expr` per element, e.g.
    `"x * (y > 0.f ? 1.f : 0.2f)"`, over inputs named as `reference`'s parameters (or `inputs`), each in
    its compute type (float for f16/bf16/f32, double for f64). Inputs broadcast as in NumPy and share one
    dtype, the output's. It fuses with the elementwise ops around it like a built-in op. `reference` and
    `vjp` as for `kernel`."""
    where = definition_site()
    params = _param_names("elementwise", name, reference, inputs, where)
    what = _user.describe("elementwise", name, where)
    return UserOp(_user.define_elementwise(name, expr, params, reference, _vjp(vjp, what), where).name)


def _param_names(kind: str, name: str, reference: Any, inputs: Sequence[str] | None, where: str | None):
    """The inputs' names: `inputs`, else the reference's positional parameters."""
    if inputs is not None:
        return tuple(inputs)
    what = _user.describe(kind, name, where)
    if reference is None:
        raise ArgumentError(f"{what}: reference= is required: a NumPy function of the input arrays giving the "
                            f"output array (the reference executor runs it)")
    try:
        ps = inspect.signature(reference).parameters.values()
    except (TypeError, ValueError):
        ps = None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if ps is None or any(p.kind not in kinds for p in ps):
        raise ArgumentError(f"{what}: cannot name its inputs from its reference's signature; pass inputs=[...]")
    return tuple(p.name for p in ps)


def _vjp(fn: Callable | None, what: str) -> Callable | None:
    if fn is None:
        return None
    if not callable(fn):
        raise ArgumentError(f"{what}: vjp= must be a function (grad, *inputs, out) -> gradients, got "
                            f"{type(fn).__name__}")
    return tensor_vjp(fn, what)


def is_available() -> bool:
    """True when a usable GPU is present (CuPy imports and sees one). Never raises."""
    return cuda_available()


def device_count() -> int:
    """The number of GPUs CuPy sees; 0 without a usable GPU. Never raises."""
    if not cuda_available():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def _cupy(what: str):
    if not cuda_available():
        raise RuntimeError(f"flame.cuda.{what} needs a CUDA GPU, and none is usable here (flame runs on the "
                           f"NumPy reference executor; check flame.cuda.is_available() first)")
    import cupy

    return cupy


def current_device() -> int:
    """The index of the current GPU."""
    return int(_cupy("current_device()").cuda.runtime.getDevice())


def get_device_name(device: int | None = None) -> str:
    """The GPU's name, e.g. 'NVIDIA H200'."""
    cupy = _cupy("get_device_name()")
    index = cupy.cuda.runtime.getDevice() if device is None else int(device)
    name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def synchronize() -> None:
    """Wait until every kernel queued on the current GPU has finished."""
    _cupy("synchronize()").cuda.Device().synchronize()


def manual_seed(seed: int) -> None:
    """Seed flame's random numbers (one generator serves every device, so this is flame.manual_seed)."""
    _manual_seed(seed)


manual_seed_all = manual_seed


def seed() -> None:
    """Reseed flame's random numbers from the operating system's entropy (flame.seed)."""
    _creation.seed()


seed_all = seed


def initial_seed() -> int:
    return _creation.initial_seed()


def get_rng_state(device: Any = "cuda") -> Tensor:
    """The default generator's state (flame.get_rng_state: one generator per process's device)."""
    return _creation.get_rng_state()


def set_rng_state(new_state: Tensor, device: Any = "cuda") -> None:
    _creation.set_rng_state(new_state)


def get_rng_state_all() -> list[Tensor]:
    """[get_rng_state()]: flame runs one device per process."""
    return [get_rng_state()]


def set_rng_state_all(new_states: list[Tensor]) -> None:
    for state in new_states:
        set_rng_state(state)


# ---- memory statistics: CuPy's pool, with a hook that keeps the peak of its bytes in use ------------

class _Peak:
    """The running peak of the pool's used bytes, kept by a CuPy memory hook once installed."""

    hook = None
    peak = 0


def _pool():
    cupy = _cupy("memory statistics")
    pool = cupy.get_default_memory_pool()
    if _Peak.hook is None:
        from cupy.cuda import memory_hook

        class _PeakHook(memory_hook.MemoryHook):
            name = "flame_cuda_peak"

            def malloc_postprocess(self, **kw):
                _Peak.peak = max(_Peak.peak, pool.used_bytes())

        _Peak.peak = pool.used_bytes()
        _Peak.hook = _PeakHook()
        _Peak.hook.__enter__()
    return pool


def memory_allocated(device: int | None = None) -> int:
    """Bytes of GPU memory held by arrays now (CuPy's pool: used bytes)."""
    return int(_pool().used_bytes())


def memory_reserved(device: int | None = None) -> int:
    """Bytes of GPU memory the pool holds from the driver (in use or cached for reuse)."""
    return int(_pool().total_bytes())


def max_memory_allocated(device: int | None = None) -> int:
    """The peak of memory_allocated() since reset_peak_memory_stats() (or the first statistics call)."""
    pool = _pool()
    return int(max(_Peak.peak, pool.used_bytes()))


def reset_peak_memory_stats(device: int | None = None) -> None:
    """Start counting max_memory_allocated() afresh from what is allocated now."""
    _Peak.peak = int(_pool().used_bytes())


# ---- streams and events ---------------------------------------------------------------------------

class Stream:
    """A CUDA stream (torch.cuda.Stream): synchronize(), query(), wait_event(e), wait_stream(s),
    record_event(). Use `with flame.cuda.stream(s):` to run work on it."""

    def __init__(self, priority: int = 0):
        self._stream = _cupy("Stream()").cuda.Stream(non_blocking=True, priority=priority)

    def synchronize(self) -> None:
        self._stream.synchronize()

    def query(self) -> bool:
        """True when all work queued on the stream has finished."""
        return bool(self._stream.done)

    def wait_event(self, event: Event) -> None:
        self._stream.wait_event(event._event)

    def wait_stream(self, other: Stream) -> None:
        """Make future work on this stream wait for the work queued on `other` so far."""
        self.wait_event(other.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event


def current_stream() -> Stream:
    """The stream flame queues work on now."""
    cupy = _cupy("current_stream()")
    s = object.__new__(Stream)
    s._stream = cupy.cuda.get_current_stream()
    return s


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """Run the block's GPU work (eager ops and compiled steps) on the given stream (None: no change)."""
    if stream is None:
        yield
        return
    with stream._stream:
        yield


class Event:
    """A CUDA event (torch.cuda.Event): record(stream), synchronize(), query(), wait(stream) and
    elapsed_time(end) in milliseconds (both events made with enable_timing=True)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = bool(enable_timing)
        self._event = _cupy("Event()").cuda.Event(block=blocking, disable_timing=not enable_timing,
                                                   interprocess=interprocess)

    def record(self, stream: Stream | None = None) -> None:
        self._event.record(None if stream is None else stream._stream)

    def synchronize(self) -> None:
        self._event.synchronize()

    def query(self) -> bool:
        return bool(self._event.done)

    def wait(self, stream: Stream | None = None) -> None:
        """Make future work on `stream` (default: the current one) wait for this event."""
        (current_stream() if stream is None else stream).wait_event(self)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and end_event (both recorded and made with enable_timing)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Event.elapsed_time needs both events made with enable_timing=True (as in torch)")
        import cupy

        return float(cupy.cuda.get_elapsed_time(self._event, end_event._event))
