"""`flame profile`: per-kernel GPU time (CUDA events, warm-up, median), achieved GB/s or TFLOP/s and
the share of the GPU's copy bandwidth measured in the same run, sorted, with the total per step.
Without a GPU: the wall time of each step on the reference executor (NumPy), labelled as such: it says
where the CPU reference spends its time, nothing about the GPU."""

from __future__ import annotations

import math
import time

import numpy as np

from flame.errors import FlameError
from flame.ir.evaluate import evaluate_graph
from flame.plan.steps import ConvCall, Copy, MatmulCall, Plan
from flame.runtime.reference import STEP_HANDLERS, bind
from flame.runtime.stepwise import GpuUnitRunner, Unit, units


def _unit_gpu_ms(launch, repeat: int) -> tuple[float, str]:
    """GPU time of one launch of a unit: `repeat` launches captured back to back in one CUDA graph,
    replayed and timed with events, so host launch overhead is not counted. Falls back to events
    around plain launches (which include it) if the unit cannot be captured."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    try:
        with stream:
            stream.begin_capture()
            try:
                for _ in range(repeat):
                    launch(stream)
            finally:
                graph = stream.end_capture()
    except Exception:  # noqa: BLE001 - not capturable: time plain launches instead
        return median_event_ms(lambda: launch(stream), repeat, stream), "events around launches"
    return median_event_ms(lambda: graph.launch(stream), 5, stream) / repeat, "graph replay"


def median_event_ms(fn, repeat: int, stream=None, warmup: int = 1) -> float:
    """Median milliseconds of fn(), by CUDA events recorded on `stream` (default: the current one)
    around each call, after `warmup` untimed calls (module load, matmul planning)."""
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def copy_bandwidth_gbs(repeat: int = 20, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus written."""
    import cupy

    src = cupy.ones(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    stream = cupy.cuda.get_current_stream()
    ms = median_event_ms(lambda: dst.__setitem__(Ellipsis, src), repeat, stream)
    return 2 * nbytes / ms / 1e6


def _gemm_rate(plan: Plan, unit: Unit, ms: float) -> str:
    s = unit.steps[0]
    flops = 2.0 * s.m * s.n * s.k * math.prod(s.batch or (1,))
    return f"{flops / ms / 1e9:8.2f} TFLOP/s"


def _bandwidth(plan: Plan, unit: Unit, ms: float) -> str:
    moved = sum(plan.buffers[b].nbytes for b in unit.ins + unit.outs)
    return f"{moved / ms / 1e6:8.1f} GB/s"


def _conv_rate(plan: Plan, unit: Unit, ms: float) -> str:
    from flame.runtime.cudnn_conv import spec_of

    return f"{spec_of(unit.steps[0].op).flops / ms / 1e9:8.2f} TFLOP/s"


_RATES = {MatmulCall: _gemm_rate, ConvCall: _conv_rate}  # step type -> its achieved rate; the rest move bytes


def _rate(plan: Plan, unit: Unit, ms: float) -> str:
    return _RATES.get(type(unit.steps[0]), _bandwidth)(plan, unit, ms)


def profile_plan(plan: Plan, inputs: list[np.ndarray], repeat: int, peak_gbs: float,
                 on: str) -> str:
    """Each kernel and library call of `plan` alone on the GPU, on the values a run on `inputs` gives
    it (`on` says what those inputs are), sorted by time."""
    import cupy

    runner = GpuUnitRunner(plan, evaluate_graph(plan.graph, inputs))
    rows, how = [], set()
    for unit in units(plan):
        bufs = runner.buffers(unit)
        try:
            ms, timer = _unit_gpu_ms(lambda st, u=unit, b=bufs: runner.launch(u, b, st), repeat)
        except Exception as e:  # name the unit: a CUDA error surfaces at the next synchronisation
            raise FlameError(f"profile {plan.name}: unit [{unit.index}] {unit.name} "
                             f"({'+'.join(o.name for o in unit.ops)}) failed: {e}") from e
        how.add(timer)
        rows.append((ms, unit, _rate(plan, unit, ms)))
    copies = [s for s in plan.steps if isinstance(s, Copy) and plan.buffers[s.dst].nbytes]
    copies_ms = _copies_gpu_ms(plan, copies, repeat) if copies else 0.0
    cupy.cuda.Device().synchronize()
    total = sum(ms for ms, _, _ in rows) + copies_ms
    side = sum(ms for ms, unit, _ in rows if getattr(unit.steps[0], "side", False))
    overlapped = f", {side * 1e3:.1f} us of it on the side stream beside other kernels" if side else ""
    copied = f" and {len(copies)} copies" if copies else ""
    timed = " and ".join(sorted(how))
    lines = [f"== {plan.name}: {len(rows)} kernels{copied}, {total * 1e3:.1f} us of GPU time per step{overlapped} "
             f"(copy bandwidth {peak_gbs:.0f} GB/s; each kernel alone, timed by {timed}, on {on}) =="]
    for ms, unit, rate in sorted(rows, key=lambda r: -r[0]):
        pct = ""
        if rate.endswith("GB/s"):
            pct = f" {100 * float(rate.split()[0]) / peak_gbs:5.1f}% of copy"
        ops = "+".join(o.name for o in unit.ops)
        where = " on side stream" if getattr(unit.steps[0], "side", False) else ""
        lines.append(f"  {ms * 1e3:9.1f} us {100 * ms / total:5.1f}%  {rate}{pct}  [{unit.index}] {unit.name}{where} "
                     f"({ops})")
    if copies:
        moved = sum(plan.buffers[c.dst].nbytes for c in copies)
        lines.append(f"  {copies_ms * 1e3:9.1f} us {100 * copies_ms / total:5.1f}%  copies: {len(copies)} device "
                     f"copies of {moved} bytes between buffers, back to back (the plan's Copy steps)")
    return "\n".join(lines)


def _copies_gpu_ms(plan: Plan, copies: list[Copy], repeat: int) -> float:
    """GPU time of the plan's Copy steps (an in-place update whose input is read after it, a returned
    input), issued back to back as a run issues them, each between buffers of its size."""
    import cupy

    from flame.runtime.cuda_steps import STEP_HANDLERS

    bufs = {b: cupy.empty(plan.buffers[b].nbytes, dtype=cupy.uint8) for c in copies for b in (c.src, c.dst)}

    def launch(stream):
        for c in copies:
            STEP_HANDLERS[Copy](c, None, bufs, stream)

    return _unit_gpu_ms(launch, repeat)[0]


def profile_records(titled, repeat: int = 20) -> str:
    """Profile every compiled function a script ran, on the inputs a further call would read (the
    state the script's calls left: a step's first call, with its optimizer moments and FP8 scales
    still unset, is not what training runs); titled: (title, debug record) pairs."""
    peak = copy_bandwidth_gbs()
    out = []
    for title, r in titled:
        if r.inputs is not None:
            inputs, on = r.steady_inputs()
            out.append(profile_plan(r.plan, inputs, repeat, peak, on).replace(f"== {r.plan.name}:", f"== {title}:", 1))
    return "\n".join(out) if out else "nothing to profile: the compiled functions were never called"


def reference_step_seconds(plan: Plan, inputs: list[np.ndarray], repeat: int) -> tuple[list[float], float]:
    """Wall seconds of each plan step on the reference executor (median of `repeat` runs, after one
    untimed run), and the median wall time of a whole run. Every run starts from copies of `inputs`
    (the plan updates some in place)."""
    per_step = [[] for _ in plan.steps]
    whole = []
    for _ in range(repeat + 1):
        bufs = bind(plan, [a.copy() for a in inputs])
        start = time.perf_counter()
        with np.errstate(all="ignore"):  # as run_plan runs the handlers
            for i, s in enumerate(plan.steps):
                t0 = time.perf_counter()
                STEP_HANDLERS[type(s)](s, bufs, plan)
                per_step[i].append(time.perf_counter() - t0)
        whole.append(time.perf_counter() - start)
    return [float(np.median(t[1:])) for t in per_step], float(np.median(whole[1:]))


def profile_plan_reference(title: str, plan: Plan, inputs: list[np.ndarray], on: str, repeat: int) -> str:
    """The reference executor's wall time per unit of work (a kernel's parts and the views before
    it count to the kernel), sorted, with the whole step's median."""
    secs, whole = reference_step_seconds(plan, inputs, repeat)
    unit_of = {id(s): u for u in units(plan) for s in u.steps}
    rows: dict[int, float] = {}
    other = 0.0
    for s, t in zip(plan.steps, secs):
        u = unit_of.get(id(s))
        if u is None:
            other += t  # views and copies
        else:
            rows[u.index] = rows.get(u.index, 0.0) + t
    by_index = {u.index: u for u in units(plan)}
    lines = [f"== {title}: reference executor, wall time, not GPU time: {whole * 1e3:.3f} ms per call "
             f"(median of {repeat}, on {on}), {len(rows)} kernels and library calls run by NumPy =="]
    total = sum(rows.values()) + other or 1.0
    for idx, t in sorted(rows.items(), key=lambda kv: -kv[1]):
        u = by_index[idx]
        ops = "+".join(o.name for o in u.ops)
        lines.append(f"  {t * 1e6:9.1f} us {100 * t / total:5.1f}%  [{u.index}] {u.name} ({ops})")
    if other:
        lines.append(f"  {other * 1e6:9.1f} us {100 * other / total:5.1f}%  views and copies")
    return "\n".join(lines)


def profile_records_reference(titled, repeat: int = 20) -> str:
    """Without a GPU: every compiled function a script ran, step by step on the reference executor
    (on the inputs a further call would read, as profile_records); titled: (title, debug record) pairs."""
    out = [profile_plan_reference(title, r.plan, *r.steady_inputs(), repeat) for title, r in titled
           if r.inputs is not None]
    if not out:
        return "nothing to profile: the compiled functions were never called"
    return ("no GPU in use: timing the NumPy reference executor instead (wall time of each step on the CPU; "
            "it says nothing about GPU kernel times)\n" + "\n".join(out))
