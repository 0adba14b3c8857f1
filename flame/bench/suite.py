"""Running the suite: for each case, generate the inputs once, run PyTorch eager (the oracle), then
flame (cold, warm-kernel-cache and warm-plan-cache compile, kernels per call, planned vs actual memory,
correctness, time), then every other peer, all in this one process on one device. A peer that fails is recorded as
"n/a: <reason>" and the suite goes on; a flame result that disagrees with the oracle is WRONG and
is not timed.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager, nullcontext

from flame.bench import timing
from flame.bench.spec import Case, as_xp, convert, flat_outputs, generate, rel_error, torch_device

ROLES_BOUND = ("input", "param", "state", "scalar", "const", "output")


def _reason(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:200]


def _where(e: BaseException, frames: int = 8) -> list[str]:
    """The innermost frames of a failure, `file:line in function`: what results.json keeps of a FAILED
    flame run beside its reason, so a failure seen once in a suite can be traced."""
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(e.__traceback__)[-frames:]]


def wrapper(framework: str, mode: str) -> Callable:
    """The `wrap` a case's factory takes (Case.flame/torch/jax(sizes, arrays, wrap)): how the step is
    prepared for `framework` ("flame", "torch" or "jax") in `mode` ("eager", "compiled" or
    "max-autotune"): flame.compile, torch.compile (its default or its "max-autotune" mode), jax.jit or
    as is."""
    if framework == "flame":
        import flame

        return lambda f, **kw: flame.compile(f, **kw)  # kw: compile options (memory_budget)
    if framework == "torch":
        if mode == "eager":
            return lambda f, **kw: f
        import torch

        if mode == "max-autotune":
            return lambda f, **kw: torch.compile(f, mode="max-autotune")
        return lambda f, **kw: torch.compile(f)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")  # f32 matmuls in f32, as flame and torch
    return lambda f, **kw: jax.jit(f, **kw)


class Context:
    """Settings of one run: device, sizes, repeats, which peers, the L2 size for rotation."""

    def __init__(self, device: str, quick: bool, repeat: int, warmup: int, peers: list[str] | None):
        self.device, self.quick, self.repeat, self.warmup = device, quick, repeat, warmup
        self.peers = peers
        self.on_gpu = device == "cuda"
        self.xp = __import__("cupy") if self.on_gpu else __import__("numpy")
        self.l2 = 0
        if self.on_gpu:
            props = self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)
            self.l2 = int(props.get("l2CacheSize", 0))
        self._torch_dev: str | None = None

    @property
    def torch_dev(self) -> str:
        if self._torch_dev is None:
            self._torch_dev = torch_device(self.device)
        return self._torch_dev

    def timer(self, framework: str) -> str:
        if framework == "jax":
            return "wall+block"
        if framework == "flame":
            return "cupy-events" if self.on_gpu else "wall"
        return "torch-events" if self.on_gpu and self.torch_dev == "cuda" else "wall"

    def n_sets(self, case: Case, data_bytes: int) -> int:
        """Input sets to rotate among: stateless cases cycle through at least 2, and enough that one
        cycle is over 3x the L2 cache (at most 8); stateful cases use 1 (their state is the point)."""
        if case.stateful:
            return 1
        need = math.ceil(3 * self.l2 / max(data_bytes, 1)) if self.l2 else 2
        return max(2, min(8, need))


@contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextmanager
def _empty_loaded_kernels():
    """Hide the CUDA executor's in-process table of loaded kernels, so a cold compile also compiles
    and loads kernels an earlier case already loaded. Yields whether it could."""
    try:
        from flame.runtime import cuda_kernels

        table = getattr(cuda_kernels, "_LOADED", None)
    except Exception:
        table = None
    if not isinstance(table, dict):
        yield False
        return
    saved = dict(table)
    table.clear()
    try:
        yield True
    finally:
        table.clear()
        table.update(saved)


@contextmanager
def _empty_compile_cache():
    """Hide the compiler's in-process compile cache, so a compile reaches the persistent plan cache
    as a new process would."""
    from flame import compiler

    saved = dict(compiler._CACHE)
    compiler._CACHE.clear()
    try:
        yield
    finally:
        compiler._CACHE.clear()
        compiler._CACHE.update(saved)


def _forget_cudnn_graphs() -> None:
    """Drop the cuDNN graphs this process built, so that the next compile makes them again (from the
    cache of built graphs on disk, or built), as a new process would."""
    from flame.runtime import cudnn_attention, cudnn_conv

    cudnn_conv.cudnn_conv.cache_clear()
    cudnn_attention.cudnn_attention.cache_clear()


def _plan_cache_time(compiled, data: list) -> tuple[float | None, float | None]:
    """Seconds to trace a fresh Compiled and load its compiled plan from the persistent plan cache
    (filled by the compiles before), with the in-process compile cache, kernel table and cuDNN graphs
    hidden, and the seconds of it spent making the plan's cuDNN graphs (built or read back from their
    cache on disk: runtime/cudnn_cache.py); (None, None) when the plan cache is off or missed."""
    from flame.codegen import disk_cache
    from flame.plan import cache as plan_cache
    from flame.runtime import cudnn_cache

    if not disk_cache.enabled():
        return None, None
    fresh = type(compiled)(compiled.fn, compiled.name, memory_budget=compiled.memory_budget)
    hits, cudnn_before = plan_cache.COUNTS.hits, cudnn_cache.COUNTS.seconds
    _forget_cudnn_graphs()
    with _empty_compile_cache(), _empty_loaded_kernels():
        t0 = time.perf_counter()
        fresh.optimized(*data)
        sec = time.perf_counter() - t0
    if plan_cache.COUNTS.hits == hits:
        return None, None
    return sec, cudnn_cache.COUNTS.seconds - cudnn_before


def _plan_facts(plan) -> dict:
    from flame.plan.steps import Copy, KernelLaunch, LibraryCall

    launches = sum(isinstance(s, KernelLaunch) and s.grid > 0 for s in plan.steps)
    calls = sum(isinstance(s, LibraryCall) for s in plan.steps)
    bound = sum(b.nbytes for b in plan.buffers.values() if b.role in ROLES_BOUND and b.base is None)
    inputs = sum(b.nbytes for b in plan.buffers.values() if b.role in ROLES_BOUND[:-1] and b.base is None)
    return {
        "kernels_per_call": launches + calls,
        "launches": launches,
        "library_calls": calls,
        "copies": sum(isinstance(s, Copy) for s in plan.steps),
        "arena_bytes": plan.arena_size,
        "bound_bytes": bound,
        "input_bytes": inputs,
        "planned_bytes": plan.arena_size + bound,
    }


def _compile_time(compiled, data: list, cold: bool) -> tuple[float, object]:
    """Seconds to trace, optimise, plan and compile a fresh Compiled (no call); and its record."""
    from flame import debug

    fresh = type(compiled)(compiled.fn, compiled.name, memory_budget=compiled.memory_budget)
    records: list = []
    with debug.observe(records.append):
        if cold:
            with _empty_loaded_kernels():
                t0 = time.perf_counter()
                fresh.optimized(*data)
                sec = time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            fresh.optimized(*data)
            sec = time.perf_counter() - t0
    return sec, (records[-1] if records else None)


def _setup(framework: str, factory, mode: str, case: Case, sizes: dict, sets: list[dict], ctx: Context):
    """Convert the inputs for `framework` and build the Bound; returns (bound, data per set)."""
    spec = case.inputs(sizes)
    dev = ctx.torch_dev if framework == "torch" else "cpu"
    arrays = {n: convert(framework, sets[0][n], i.dtype, i.state, dev) for n, i in spec.items()}
    data = [
        [arrays[n] if k == 0 else convert(framework, s[n], i.dtype, False, dev) for n, i in spec.items() if not i.state]
        for k, s in enumerate(sets)
    ]
    return factory(sizes, arrays, wrapper(framework, mode)), data


def _check(bound, data0: list, ctx: Context, around=None) -> tuple[list, list]:
    """Run one step: (its outputs, the change of every state array), as f32 xp arrays. around: a
    context manager around the call alone (the peak-memory watch)."""
    before = [as_xp(p, ctx.xp, copy=True) for p in bound.state()]
    with around or nullcontext():
        out = bound.call(*data0)
    outs = [as_xp(o, ctx.xp, copy=True) for o in flat_outputs(out)]
    after = [as_xp(p, ctx.xp) for p in bound.state()]
    return outs, [a - b for a, b in zip(after, before)]


def _errors(got: tuple[list, list], want: tuple[list, list], ctx: Context) -> tuple[float, float | None]:
    """Relative errors of the outputs and of the state changes (None where there are none)."""
    return (
        rel_error(got[0], want[0], ctx.xp) if want[0] or got[0] else None,
        rel_error(got[1], want[1], ctx.xp) if want[1] or got[1] else None,
    )


def _blocker(bound, timer: str):
    """What waits for a call's asynchronous results (JAX), or None."""
    if timer != "wall+block":
        return None
    import jax

    return lambda r: jax.block_until_ready((r, bound.state()))


def _peak_memory(bound, data0: list, watch: timing.MemoryWatch, timer: str) -> dict:
    """One more (steady-state) call under the framework's memory watch: its peak-memory figures."""
    block = _blocker(bound, timer) or (lambda r: None)
    with watch:
        block(bound.call(*data0))
    return watch.result()


def _time(bound, data: list, timer: str, ctx: Context) -> dict:
    block = _blocker(bound, timer)
    call = lambda i: bound.call(*data[i % len(data)])  # noqa: E731
    samples = timing.run_timed(call, timer, ctx.repeat, ctx.warmup, block)
    batches, per_batch = (1, 2) if ctx.quick else (5, max(2, ctx.repeat // 3))
    b2b = timing.run_back_to_back(call, timer, batches, per_batch, block)
    return {
        "timer": timer,
        **timing.summary(samples),
        "b2b_ms": statistics.median(b2b),
        "b2b_samples": b2b,
        "b2b_calls": per_batch,
    }


def run_flame(case: Case, sizes: dict, sets: list[dict], oracle: list | None, ctx: Context) -> dict:
    """flame's figures for one case; 'status' is ok, WRONG, UNCHECKED or FAILED."""
    res: dict = {"device": ctx.device}
    try:
        with tempfile.TemporaryDirectory(prefix="flame-bench-cache-") as cache, _env("FLAME_CACHE_DIR", cache):
            memory = timing.MemoryWatch("flame", ctx.on_gpu).start()
            bound, data = _setup("flame", case.flame, "compiled", case, sizes, sets, ctx)
            res["compile_cold_s"], record = _compile_time(bound.call, data[0], cold=True)
            res["compile_warm_s"], _ = _compile_time(bound.call, data[0], cold=False)
            res["compile_warm_plan_s"], res["compile_warm_plan_cudnn_s"] = _plan_cache_time(bound.call, data[0])
            plan = record.plan
            if plan is not None:
                res.update(_plan_facts(plan))
            watch = timing.PeakWatch(ctx.on_gpu)
            got = _check(bound, data[0], ctx, around=watch)
            res["peak_growth_bytes"] = watch.peak
            if watch.peak is not None and plan is not None:
                res["actual_peak_bytes"] = res["input_bytes"] + watch.peak
            if oracle is None:
                res["status"], res["rel_error"] = "UNCHECKED", None
            else:
                err, state_err = _errors(got, oracle, ctx)
                res["rel_error"], res["rel_error_state"] = err, state_err
                state_tol = case.tol if case.state_tol is None else case.state_tol
                ok = (err is None or err <= case.tol) and (state_err is None or state_err <= state_tol)
                res["status"] = "ok" if ok else "WRONG"
                if not ok and got[1]:  # which state went wrong, in Bound.state() order
                    res["rel_error_state_each"] = [rel_error([g], [w], ctx.xp) for g, w in zip(got[1], oracle[1])]
            del got
            if res["status"] != "WRONG":
                res.update(_peak_memory(bound, data[0], memory, ctx.timer("flame")))
                res.update(_time(bound, data, ctx.timer("flame"), ctx))
    except Exception as e:
        res["status"], res["error"], res["where"] = "FAILED", _reason(e), _where(e)
    return res


def run_peer(
    name: str,
    framework: str,
    factory,
    mode: str,
    case: Case,
    sizes: dict,
    sets: list[dict],
    oracle: list | None,
    ctx: Context,
    keep_check: bool = False,
    timed: bool = True,
) -> tuple[dict, list | None]:
    """One peer's figures (or n/a: reason); with keep_check, also its check outputs (the oracle);
    timed=False only runs the check."""
    res: dict = {"framework": framework, "mode": mode}
    check = None
    try:
        off_gpu = _off_gpu(framework, ctx)
        if off_gpu and not keep_check:
            raise RuntimeError(off_gpu)
        memory = timing.MemoryWatch(framework, ctx.on_gpu and not off_gpu).start()
        bound, data = _setup(framework, factory, mode, case, sizes, sets, ctx)
        t0 = time.perf_counter()
        check = _check(bound, data[0], ctx)
        if framework == "torch" and ctx.torch_dev == "cuda":
            import torch

            torch.cuda.synchronize()
        res["first_call_s"] = time.perf_counter() - t0
        if mode != "eager":  # a compiled peer compiles in its first call: that call's time, beside its step time
            res["compile_s"] = res["first_call_s"]
        res["device"] = ctx.torch_dev if framework == "torch" else _jax_device(framework)
        if oracle is not None:
            res["rel_error_vs_torch"], res["rel_error_state_vs_torch"] = _errors(check, oracle, ctx)
        if timed and not off_gpu:
            res.update(_peak_memory(bound, data[0], memory, ctx.timer(framework)))
            res.update(_time(bound, data, ctx.timer(framework), ctx))
        res["status"] = "ok" if not off_gpu else f"n/a: {off_gpu} (used as the correctness oracle only)"
    except Exception as e:
        res = {"framework": framework, "mode": mode, "status": f"n/a: {_reason(e)}"}
        check = None
    return res, (check if keep_check else None)


def _off_gpu(framework: str, ctx: Context) -> str:
    """Why a peer cannot run on the GPU flame runs on ('' if it can, or if flame is on the CPU)."""
    if not ctx.on_gpu:
        return ""
    if framework == "torch" and ctx.torch_dev != "cuda":
        return "torch has no CUDA here"
    if framework == "jax":
        import jax

        if jax.default_backend() not in ("gpu", "cuda"):
            return f"jax has no GPU backend here ({jax.default_backend()})"
    return ""


def _jax_device(framework: str) -> str | None:
    if framework != "jax":
        return None
    import jax

    return str(jax.devices()[0])


def _available(framework: str) -> str:
    """'' if the framework imports, else why not."""
    import importlib

    try:
        importlib.import_module(framework)
    except ImportError:
        return f"n/a: {framework} is not installed"
    except Exception as e:  # installed but broken (a CUDA mismatch, say)
        return f"n/a: import {framework} failed: {_reason(e)}"
    return ""


def run_case(case: Case, ctx: Context) -> dict:
    """Every figure of one case (see the module docstring for the order)."""
    sizes = case.sizes(ctx.quick)
    spec = case.inputs(sizes)
    data_bytes = sum(i.nbytes for i in spec.values() if not i.state)
    n_sets = ctx.n_sets(case, data_bytes)
    out = {
        "name": case.name,
        "what": case.what,
        "sizes": sizes,
        "min_bytes": case.min_bytes(sizes),
        "min_flops": case.min_flops(sizes) if case.min_flops else None,
        "tol": case.tol,
        "input_sets": n_sets,
        "bytes_per_input_set": data_bytes,
        "peers": {},
    }
    sets = [generate(spec, ctx.xp, seed=k) for k in range(n_sets)]
    peers = case.peers()
    wanted = [p for p in peers if ctx.peers is None or p in ctx.peers]
    oracle = None
    if "torch" in peers:
        why = _available("torch")
        if why:
            out["peers"]["torch"] = {"status": why}
        else:
            fw, fac, mode = peers["torch"]
            res, oracle = run_peer(
                "torch", fw, fac, mode, case, sizes, sets, None, ctx, keep_check=True, timed="torch" in wanted
            )
            timing.free_memory()  # after the return, so the peer's arrays are unreachable
            if "torch" in wanted or res["status"] != "ok":
                out["peers"]["torch"] = res
    out["oracle"] = "torch eager" if oracle is not None else None
    out["flame"] = run_flame(case, sizes, sets, oracle, ctx)
    timing.free_memory()
    for name in wanted:
        if name == "torch":
            continue
        fw, fac, mode = peers[name]
        why = _available(fw)
        out["peers"][name] = (
            {"status": why} if why else run_peer(name, fw, fac, mode, case, sizes, sets, oracle, ctx)[0]
        )
        timing.free_memory()
    del sets, oracle
    timing.free_memory()
    return out
