"""First measurement: device copy bandwidth (CuPy copy) against one large flame elementwise kernel and
one flame row reduction, each timed with CUDA events after warm-up, median of many runs. Bandwidth
counts bytes read plus bytes written. Prints the device and a short table, last.

    PYTHONPATH=. python3 -m benchmarks.scripts.first_measure [--mib 1024] [--reps 50]
"""

from __future__ import annotations

import argparse

from flame.runtime.profile import median_event_ms


def _single_kernel(graph):
    """The one compiled kernel of a one-op graph, and a launcher on given arrays."""
    from flame.plan.build import to_plan
    from flame.runtime.cuda_kernels import load_kernels, source_key

    plan = to_plan(graph)
    (k,) = plan.kernels()
    fn = load_kernels([k])[(source_key(k.source), k.name)]
    return k, lambda *arrays: fn((k.grid,), (k.block,), list(arrays), shared_mem=k.smem)


def _call_overhead_us(calls: int) -> float:
    """Host time per call of a small compiled plan (3 kernels): the Python cost a CUDA graph removes."""
    import time

    import cupy

    from flame.ir import Builder, Graph, TensorType, dtype_of, verify
    from flame.plan.build import to_plan
    from flame.runtime.cuda import CudaExecutor

    g = Graph("small")
    b = Builder(g)
    x = g.add_input(TensorType((32, 32), dtype_of("f32")))
    g.outputs = [b.tanh(b.add(b.exp(x), x))]
    run = CudaExecutor().compile(to_plan(verify(g)))
    xs = [cupy.ones((32, 32), cupy.float32)]
    for _ in range(10):
        run(xs)
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        run(xs)
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    import cupy

    from flame.ir import Builder, Graph, TensorType, dtype_of, verify

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=1024, help="size of each input in MiB")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    f32 = dtype_of("f32")
    n = args.mib * 2**20 // 4
    rng = cupy.random.default_rng(0)
    x = rng.standard_normal(n, dtype=cupy.float32)
    y = rng.standard_normal(n, dtype=cupy.float32)
    out = cupy.empty_like(x)

    t_copy = median_event_ms(lambda: cupy.copyto(out, x), args.reps, warmup=5)
    copy_gbs = 2 * x.nbytes / t_copy / 1e6

    g = Graph("add")
    a, b = g.add_input(TensorType((n,), f32)), g.add_input(TensorType((n,), f32))
    g.outputs = [Builder(g).add(a, b)]
    k_add, add = _single_kernel(verify(g))
    t_add = median_event_ms(lambda: add(x, y, out), args.reps, warmup=5)
    assert bool(cupy.allclose(out[:4096], x[:4096] + y[:4096]))
    add_gbs = 3 * x.nbytes / t_add / 1e6

    cols = 16384
    rows = n // cols
    g = Graph("rowsum")
    v = g.add_input(TensorType((rows, cols), f32))
    g.outputs = [Builder(g).reduce_sum(v, axes=[1], keepdim=False)]
    k_red, red = _single_kernel(verify(g))
    sums = cupy.empty(rows, cupy.float32)
    xm = x[: rows * cols].reshape(rows, cols)
    t_red = median_event_ms(lambda: red(xm, sums), args.reps, warmup=5)
    assert bool(cupy.allclose(sums[:8], xm[:8].sum(axis=1), rtol=1e-3, atol=1e-2))
    red_gbs = (xm.nbytes + sums.nbytes) / t_red / 1e6

    t_call = _call_overhead_us(args.reps * 20)

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}  input {args.mib} MiB f32, median of {args.reps}")
    print(f"kernels: {k_add.name} <<<{k_add.grid},{k_add.block}>>>, {k_red.name} <<<{k_red.grid},{k_red.block}>>>")
    print(f"{'what':<28}{'ms':>9}{'GB/s':>9}{'% copy':>9}")
    for what, t, gbs in (("cupy copy (read+write)", t_copy, copy_gbs), ("flame add f32 (2r+1w)", t_add, add_gbs),
                         (f"flame row sum [{rows},{cols}]", t_red, red_gbs)):
        print(f"{what:<28}{t:>9.3f}{gbs:>9.0f}{100 * gbs / copy_gbs:>8.0f}%")
    print(f"host time per call of a compiled 3-op plan on [32,32] f32 (no CUDA graph): {t_call:.1f} us")


if __name__ == "__main__":
    main()
