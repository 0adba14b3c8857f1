"""`flame profile`: per-kernel GPU time (CUDA events, warm-up, median), achieved GB/s or TFLOP/s and
the share of the GPU's copy bandwidth measured in the same run, sorted, with the total per step."""

from __future__ import annotations

import math

import numpy as np

from flame.errors import FlameError
from flame.ir.evaluate import evaluate_graph
from flame.plan.steps import ConvCall, MatmulCall, Plan
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


def profile_plan(plan: Plan, inputs: list[np.ndarray], repeat: int, peak_gbs: float) -> str:
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
    cupy.cuda.Device().synchronize()
    total = sum(ms for ms, _, _ in rows)
    lines = [f"== {plan.name}: {len(rows)} kernels, {total * 1e3:.1f} us of GPU time per step "
             f"(copy bandwidth {peak_gbs:.0f} GB/s; timed by {' and '.join(sorted(how))}) =="]
    for ms, unit, rate in sorted(rows, key=lambda r: -r[0]):
        pct = ""
        if rate.endswith("GB/s"):
            pct = f" {100 * float(rate.split()[0]) / peak_gbs:5.1f}% of copy"
        ops = "+".join(o.name for o in unit.ops)
        lines.append(f"  {ms * 1e3:9.1f} us {100 * ms / total:5.1f}%  {rate}{pct}  [{unit.index}] {unit.name} ({ops})")
    return "\n".join(lines)


def profile_records(records, repeat: int = 20) -> str:
    """Profile every compiled function a script ran (on its first call's inputs)."""
    peak = copy_bandwidth_gbs()
    out = [profile_plan(r.plan, r.inputs, repeat, peak) for r in records if r.inputs is not None]
    return "\n".join(out) if out else "nothing to profile: the compiled functions were never called"
