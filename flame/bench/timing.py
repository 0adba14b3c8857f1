"""Timers, the two ceilings (device copy bandwidth, matmul rate), peak-memory watching and the
description of the machine. Every timer warms up first, then times each call on its own (start the
clock, one call, stop, synchronise) and returns every sample; the suite reports the median.

- flame on the GPU: CuPy events on CuPy's current stream (flame launches there);
- torch on the GPU: torch.cuda.Event on torch's current stream;
- JAX: wall clock around the call and jax.block_until_ready (JAX's streams are its own, so no
  event can be recorded on them; this includes JAX's dispatch and one host synchronisation);
- anything on the CPU (the reference executor, torch on the CPU): wall clock.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone

EVENT_TIMERS = ("cupy-events", "torch-events")
TIMERS = {
    "cupy-events": "CUDA events (cupy.cuda.Event) on CuPy's current stream around each call",
    "torch-events": "CUDA events (torch.cuda.Event) on torch's current stream around each call",
    "wall+block": "time.perf_counter around each call and jax.block_until_ready (includes dispatch and a host "
                  "sync)",
    "wall": "time.perf_counter around each call (CPU)",
}


def run_timed(call: Callable[[int], object], timer: str, repeat: int, warmup: int,
              block: Callable[[object], None] | None = None) -> tuple[list[float], list[float]]:
    """Milliseconds of `repeat` calls of call(i) (i = call number, for input rotation), each timed
    alone after `warmup` untimed calls: (timer samples, wall-clock samples). The wall clock spans the
    call and a full synchronisation, a cross-check of event timers (events only see their stream).
    block(result) waits for asynchronous results (JAX)."""
    block = block or (lambda r: None)
    for i in range(warmup):
        block(call(i))
    sync = _sync(timer)
    sync()
    samples, wall = [], []
    for i in range(warmup, warmup + repeat):
        t0 = time.perf_counter()
        if timer in EVENT_TIMERS:
            samples.append(_event_ms(timer, lambda i=i: call(i)))
            sync()
        else:
            block(call(i))
            sync()
        wall.append((time.perf_counter() - t0) * 1e3)
        if timer not in EVENT_TIMERS:
            samples.append(wall[-1])
    return samples, wall


def _sync(timer: str) -> Callable[[], None]:
    if timer == "cupy-events":
        import cupy

        return cupy.cuda.Device().synchronize
    if timer == "torch-events":
        import torch

        return torch.cuda.synchronize
    return lambda: None


def run_back_to_back(call: Callable[[int], object], timer: str, batches: int, per_batch: int,
                     block: Callable[[object], None] | None = None) -> list[float]:
    """Milliseconds per call of `batches` batches of `per_batch` calls issued back to back (no
    synchronisation between the calls of a batch), after run_timed's warm-up: the time per call when
    the GPU never waits for the host, as in a training loop — host dispatch hides behind the previous
    call's GPU work whenever that work is longer. Events timers: one untimed call, then an event, the
    batch, an event: the first event fires when that call's GPU work ends, by which time the host has
    issued the batch's first calls, so no call of the batch waits for a dispatch the loop would have
    hidden (timed from an idle GPU, the first call's dispatch latency counted, 1/per_batch of it per
    call: a tenth of flame's ~0.1 ms before an optimizer step's graph launch); wall+block: the wall
    clock until the last result is ready; wall: the CPU wall clock. One untimed batch goes first:
    what a framework does the first time calls pile up (torch's allocator growing for the outputs a
    batch holds, flame capturing a graph for another output buffer) is warm-up, not a call's time."""
    block = block or (lambda r: None)
    sync = _sync(timer)
    out = []
    for b in range(batches + 1):
        first = b * (per_batch + 1)
        calls = range(first + 1, first + 1 + per_batch)
        sync()
        if timer in EVENT_TIMERS:
            out.append(_event_ms(timer, lambda c=calls: [call(i) for i in c], lead=lambda f=first: call(f))
                       / per_batch)
            sync()
            continue
        t0 = time.perf_counter()
        block([call(i) for i in calls][-1])
        sync()
        out.append((time.perf_counter() - t0) * 1e3 / per_batch)
    return out[1:]


def _event_ms(timer: str, work: Callable[[], object], lead: Callable[[], object] | None = None) -> float:
    """Milliseconds between two CUDA events (CuPy's or torch's current stream) around work(); lead()
    runs untimed first, its GPU work ahead of the first event."""
    if lead is not None:
        lead()
    if timer == "cupy-events":
        import cupy

        stream = cupy.cuda.get_current_stream()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        work()
        stop.record(stream)
        stop.synchronize()
        return float(cupy.cuda.get_elapsed_time(start, stop))
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    stop.record()
    stop.synchronize()
    return float(start.elapsed_time(stop))


def summary(samples: tuple[list[float], list[float]]) -> dict:
    """Median, min, max and spread ((max - min) / median) of the timer's samples in ms, and the median
    of the wall-clock cross-check."""
    ms, wall = samples
    med = statistics.median(ms)
    return {"median_ms": med, "min_ms": min(ms), "max_ms": max(ms), "samples": len(ms),
            "spread": (max(ms) - min(ms)) / med if med > 0 else 0.0, "wall_median_ms": statistics.median(wall)}


# ---------------------------------------------------------------------------------------------
# ceilings, measured at the start of the run on the same GPU


def copy_bandwidth(quick: bool, repeat: int) -> dict:
    """Device-to-device copy of a large CuPy array; GB/s counts bytes read plus bytes written."""
    import cupy

    n = (64 if quick else 1024) * 2**20 // 4
    src = cupy.random.RandomState(7).standard_normal(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    ms = statistics.median(run_timed(lambda i: cupy.copyto(dst, src), "cupy-events", max(repeat, 5), 3)[0])
    b2b = statistics.median(run_back_to_back(lambda i: cupy.copyto(dst, src), "cupy-events", 5, 10))
    ok = bool(cupy.array_equal(dst, src))
    return {"gbs": 2 * src.nbytes / ms / 1e6, "ms": ms, "gbs_b2b": 2 * src.nbytes / b2b / 1e6, "ms_b2b": b2b,
            "bytes_per_copy": 2 * src.nbytes, "how":
            f"cupy.copyto of {src.nbytes >> 20} MiB f32, read+write counted, median of CUDA events",
            "verified": ok}


def matmul_rate(quick: bool, repeat: int) -> dict:
    """A large bf16 GEMM through torch (f16 through CuPy when torch has no CUDA): TFLOP/s."""
    n = 4096 if quick else 8192
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch has no CUDA")
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
        ms = statistics.median(run_timed(lambda i: torch.matmul(a, b), "torch-events", max(repeat, 5), 3)[0])
        how = f"torch.matmul bf16 {n}^3, median of CUDA events"
    except ImportError:
        import cupy

        rs = cupy.random.RandomState(0)
        a = rs.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
        b = rs.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
        ms = statistics.median(run_timed(lambda i: cupy.matmul(a, b), "cupy-events", max(repeat, 5), 3)[0])
        how = f"cupy.matmul f16 {n}^3 (torch with CUDA not available), median of CUDA events"
    return {"tflops": 2 * n**3 / ms / 1e9, "ms": ms, "how": how}


# ---------------------------------------------------------------------------------------------
# memory


class PeakWatch:
    """Peak growth of the CuPy memory pool inside a `with` block (a CuPy MemoryHook): `peak`, of its
    used bytes (+ on each pool malloc, - on each free); `grown`, of its total (reserved) bytes (the
    device allocations the pool made); `used0`/`total0`, the pool's bytes at entry. On the reference
    executor it measures nothing (all None)."""

    def __init__(self, on_gpu: bool):
        self.on_gpu, self.peak, self.grown, self.used0, self.total0, self._hook = on_gpu, None, None, None, None, None

    def __enter__(self):
        if self.on_gpu:
            import cupy
            from cupy.cuda import memory_hook

            watch = self
            pool = cupy.get_default_memory_pool()
            self.used0, self.total0 = pool.used_bytes(), pool.total_bytes()

            class _Hook(memory_hook.MemoryHook):
                name = "flame_bench_peak"

                def __init__(self):
                    self.cur = 0
                    watch.peak = watch.grown = 0

                def alloc_postprocess(self, **kw):
                    watch.grown += kw.get("mem_size", 0)

                def malloc_postprocess(self, **kw):
                    self.cur += kw.get("mem_size", 0)
                    watch.peak = max(watch.peak, self.cur)

                def free_postprocess(self, **kw):
                    self.cur -= kw.get("mem_size", 0)

            self._hook = _Hook()
            self._hook.__enter__()
        return self

    def __exit__(self, *exc):
        if self._hook is not None:
            import cupy

            cupy.cuda.Device().synchronize()
            self._hook.__exit__(*exc)
        return False


MEMORY_HOW = {
    "flame": "high-water of CuPy's pool during a steady-state call (used bytes; total = reserved by the pool), "
             "above what the pool held before flame's arrays were set up",
    "torch": "torch.cuda.max_memory_allocated (and max_memory_reserved) after reset_peak_memory_stats, over a "
             "steady-state call, above what torch held before the peer was set up",
    "jax": "the device's memory_stats() peak_bytes_in_use since the peer was set up (JAX cannot reset it), above "
           "bytes_in_use before; n/a where the backend has no stats or an earlier case peaked higher",
}


class MemoryWatch:
    """Peak device memory of one framework over one steady-state call, counted from what its allocator
    held before the framework's arrays were set up (so the suite's own input sets do not count, and the
    parameters, optimizer state, arena or caches the framework made do). start() before the set-up;
    `with watch:` around one call; result() -> figures for results.json ("n/a: why" when unmeasured)."""

    def __init__(self, framework: str, on_gpu: bool):
        self.framework, self.on_gpu = framework, on_gpu
        self.base: dict = {}
        self.out: dict = {"peak_memory": f"n/a: {framework} is not on a GPU" if not on_gpu else "n/a: not measured"}
        self._pool = None

    def start(self) -> MemoryWatch:
        if not self.on_gpu:
            return self
        if self.framework == "flame":
            import cupy

            pool = cupy.get_default_memory_pool()
            self.base = {"used": pool.used_bytes(), "total": pool.total_bytes()}
        elif self.framework == "torch":
            import torch

            self.base = {"used": torch.cuda.memory_allocated(), "total": torch.cuda.memory_reserved()}
        else:
            stats = _jax_stats()
            self.base = {"used": stats.get("bytes_in_use"), "peak": stats.get("peak_bytes_in_use")}
        return self

    def __enter__(self):
        if self.on_gpu and self.framework == "flame":
            self._pool = PeakWatch(True).__enter__()
        elif self.on_gpu and self.framework == "torch":
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc):
        if not self.on_gpu or exc[0] is not None:
            return False
        if self.framework == "flame":
            w = self._pool
            w.__exit__(*exc)
            self.out = {"peak_memory_bytes": w.used0 + w.peak - self.base["used"],
                        "pool_total_peak_bytes": w.total0 + w.grown - self.base["total"]}
        elif self.framework == "torch":
            import torch

            torch.cuda.synchronize()
            self.out = {"peak_memory_bytes": torch.cuda.max_memory_allocated() - self.base["used"],
                        "reserved_peak_bytes": torch.cuda.max_memory_reserved() - self.base["total"]}
        else:
            self.out = self._jax_result()
        self.out["peak_memory_how"] = MEMORY_HOW[self.framework]
        return False

    def _jax_result(self) -> dict:
        peak = _jax_stats().get("peak_bytes_in_use")
        if peak is None or self.base.get("used") is None:
            return {"peak_memory": "n/a: JAX's backend reports no memory stats"}
        if self.base.get("peak") is not None and peak <= self.base["peak"]:
            return {"peak_memory": "n/a: an earlier case peaked higher (JAX's peak cannot be reset)"}
        return {"peak_memory_bytes": peak - self.base["used"]}

    def result(self) -> dict:
        return dict(self.out)


def _jax_stats() -> dict:
    import jax

    try:
        return jax.devices()[0].memory_stats() or {}
    except Exception:
        return {}


def free_memory() -> None:
    """Give cached device memory back between frameworks, so each starts from the same state."""
    import gc

    gc.collect()
    if sys.modules.get("cupy") is not None:
        try:
            import cupy

            cupy.cuda.Device().synchronize()
            cupy.get_default_memory_pool().free_all_blocks()
        except Exception:
            pass
    if sys.modules.get("torch") is not None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# the machine


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "unknown")
    except Exception:
        return None


def environment(device: str) -> dict:
    """GPU, driver, CUDA and library versions, date: everything a reader needs to place the numbers."""
    import numpy

    import flame

    env = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "flame_device": device,
           "flame": flame.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
           "platform": platform.platform(), "cupy": _version("cupy"), "torch": _version("torch"),
           "jax": _version("jax") if _find("jax") else None}
    if device != "cuda":
        env["gpu"] = "none (reference executor)"
        return env
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    env["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    env["l2_bytes"] = int(props.get("l2CacheSize", 0))
    env["sm_count"] = int(props.get("multiProcessorCount", 0))
    env["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    env["cuda_driver_api"] = cupy.cuda.runtime.driverGetVersion()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        env["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
    except Exception:
        env["driver"] = None
    if env["torch"]:
        import torch

        env["torch_cuda"] = torch.version.cuda
    return env


def _find(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def prepare_jax() -> None:
    """Stop JAX from grabbing 75% of GPU memory at import (it shares the GPU with CuPy and torch)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
