"""Column reductions (the innermost dim kept: BatchNorm statistics of channels-last data, bias
gradients) under the column schedule of flame/codegen/reduce.py, timed on one GPU against a device
copy of the same bytes and checked against NumPy in float64. (Its module docstring records the run of
this script that retired the old column schedule.)

    PYTHONPATH=. python3 benchmarks/scripts/reduce_columns.py [--ops reduce_sum,reduce_mean] [--reps 50]

Each case is one reduce_sum/reduce_mean op, lowered (the column kernel, plus the fold of its
partials when R is split) and launched directly with CuPy on N(0, 1) inputs (bf16 held as its bits);
outputs are poisoned with NaN before the checked run. Times: CUDA events around each launch
sequence, median of --reps after 5 warm-ups; inputs smaller than --rotate-mb are rotated over copies
of at least that many bytes in all, so they are not served from L2 (the copy too). "% copy": a
cupy.copyto of as many bytes (input read + output written) over the kernels' time. "rel err":
max |kernel - NumPy| / max |NumPy| (bf16 output: one rounding is about 4e-3).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from flame.runtime.profile import median_event_ms  # noqa: E402

# (shape, dtype, reduced axes)
SHAPES = [
    ((64, 64, 64, 128), "bf16", (0, 1, 2)),  # the ResNet step's BatchNorm statistics (channels-last)
    ((262144, 128), "bf16", (0,)),
    ((32768, 4096), "bf16", (0,)),  # was 89 % of copy: must not get slower
    ((8192, 768), "bf16", (0,)),
    ((4096, 64), "f32", (0,)),
    ((1000, 3), "f32", (0,)),
    ((65536, 256), "bf16", (0,)),
    ((16384, 512), "bf16", (0,)),
    ((65536, 256), "f32", (0,)),
    ((64, 4096, 128), "bf16", (0, 1)),
    ((64, 4096, 128), "bf16", (1,)),
]


def _op(shape, dt: str, axes, name: str):
    from flame.ir import Builder, Graph, TensorType, dtype_of, verify

    g = Graph(name)
    b = Builder(g)
    x = g.add_input(TensorType(shape, dtype_of(dt)))
    g.outputs = [getattr(b, name)(x, axes=list(axes))]
    return verify(g).ops[-1]


def _lower(op) -> list:
    from flame.codegen import lower
    from flame.codegen.lower import single

    return lower(single(op))


def _device_input(shape, dt: str, seed: int):
    """N(0, 1) in the input dtype (bf16: its bits, rounded to nearest even)."""
    import cupy

    x = cupy.random.RandomState(seed).standard_normal(shape, dtype=np.float32)
    if dt == "bf16":
        bits = x.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(np.float16) if dt == "f16" else x


def _host(a, dt: str) -> np.ndarray:
    from flame.ir import dtype_of

    return a.get().view(dtype_of(dt).np_dtype).astype(np.float64)


def _launcher(kernels, ins: list, out, scratch):
    """fn() launching the kernels in order on the current stream, on the next input each call."""
    import cupy

    from flame.codegen import nvrtc

    fns = []
    for k in kernels:
        mod = cupy.cuda.function.Module()
        mod.load(nvrtc.compile_cubin(k.source, nvrtc.device_arch()))
        fns.append((mod.get_function(k.name), k))
    turn = [0]

    def run():
        x = ins[turn[0] % len(ins)]
        turn[0] += 1
        for fn, k in fns:
            fn((k.grid,), (k.block,), (x, out, *([scratch] if k.scratch else [])))

    return run


def _copies(a, rotate_bytes: int) -> list:
    """a, plus copies of it so that all of them hold at least rotate_bytes."""
    n = max(1, min(64, -(-rotate_bytes // a.nbytes)))
    return [a] + [a.copy() for _ in range(n - 1)]


def _rotating_copy(nbytes: int, rotate_bytes: int):
    """fn() copying nbytes on the device, each call from the next of copies holding at least
    rotate_bytes in all (so the copy, like the kernels it is compared with, is not served from L2)."""
    import cupy

    src = _copies(cupy.ones(nbytes // 4, np.float32), rotate_bytes)
    dst = cupy.empty_like(src[0])
    turn = [0]

    def copy():
        cupy.copyto(dst, src[turn[0] % len(src)])
        turn[0] += 1

    return copy


def _case(shape, dt, axes, name, opts) -> tuple:
    import cupy

    x = _device_input(shape, dt, seed=len(shape) + len(axes))
    want = np.sum if name == "reduce_sum" else np.mean
    want = want(_host(x, dt), axis=tuple(axes))
    ins = _copies(x, opts.rotate_mb << 20)
    out_dt = np.uint16 if dt == "bf16" else x.dtype
    nbytes = x.nbytes + want.size * np.dtype(out_dt).itemsize
    copy_ms = median_event_ms(_rotating_copy(nbytes, opts.rotate_mb << 20), opts.reps, warmup=5)
    kernels = _lower(_op(shape, dt, axes, name))
    out = cupy.full(want.shape, 0x7FC0, np.uint16) if dt == "bf16" else cupy.full(want.shape, np.nan, x.dtype)
    scratch = cupy.empty(max(1, max(k.scratch for k in kernels)), np.uint8)
    run = _launcher(kernels, ins, out, scratch)
    run()  # the checked run: on the first input (x), into the poisoned output
    cupy.cuda.get_current_stream().synchronize()
    got = _host(out, dt)
    err = float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
    err = err if np.isfinite(got).all() else float("inf")
    ms = median_event_ms(run, opts.reps, warmup=5)
    launch = " + ".join(f"{k.grid}x{k.block}" for k in kernels)
    row = (
        f"{name[7:]} {list(shape)} over {list(axes)}",
        dt,
        ms * 1e3,
        nbytes / ms / 1e6,
        copy_ms / ms * 100,
        err,
        launch,
    )
    print(
        f"  {row[0]:40s} {dt:5s} {row[2]:8.1f} us {row[3]:7.0f} GB/s {row[4]:5.1f}% copy  err {err:.1e}  grid {launch}",
        flush=True,
    )
    return row


def main() -> None:
    import cupy

    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="reduce_sum,reduce_mean")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rotate-mb", type=int, default=256, help="rotate inputs over copies of this many MiB")
    opts = ap.parse_args()
    t0 = time.perf_counter()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    rows = []
    for shape, dt, axes in SHAPES:
        for name in opts.ops.split(","):
            rows.append(_case(shape, dt, axes, name, opts))
            cupy.get_default_memory_pool().free_all_blocks()
    print(
        f"\n(total {time.perf_counter() - t0:.0f} s; % copy: a cupy.copyto of the same bytes over the kernels' "
        f"time; rel err: max |kernel - NumPy| / max |NumPy|)"
    )
    print(f"{'case':40s} {'dtype':5s} {'us':>8s} {'GB/s':>7s} {'% copy':>7s} {'rel err':>8s}  launches")
    for case, dt, us, gbs, pct, err, launch in rows:
        print(f"{case:40s} {dt:5s} {us:8.1f} {gbs:7.0f} {pct:7.1f} {err:8.1e}  {launch}")


if __name__ == "__main__":
    main()
