"""Where the per-call time of a benchmark case goes that back-to-back calls do not pay: for a few cases,
flame's compiled call timed (1) alone and (2) back to back (10 calls between two events), with the
suite's timers (flame.bench.timing), and (3) the host wall time of one call up to its return (its
launches are asynchronous: this is the time before the GPU has work, when it was idle).

    python3 -m benchmarks.scripts.dispatch_gap [--repeat 30]

Prints one table; all times in microseconds, medians, on the current GPU."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import flame
import flame.bench.cases as C
from flame.bench import timing

CASES = {"softmax": C._flame_softmax, "layer_norm_fwd_bwd": C._flame_layer_norm_bwd,
         "cross_entropy_fwd_bwd": C._flame_xent}


def main() -> None:
    import cupy

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args()
    specs = {c.name: c for c in C.STATELESS}
    rows = []
    for name, make in CASES.items():
        case = specs[name]
        s = case.sizes(False)
        rng = np.random.default_rng(0)
        args = []
        for inp in case.inputs(s).values():
            arr = (rng.integers(0, inp.high, inp.shape) if inp.dtype == "i64"
                   else rng.standard_normal(inp.shape, dtype=np.float32))
            args.append(flame.tensor(arr))
        fn = flame.compile(make(s))
        call = lambda i, fn=fn, args=args: fn(*args)  # noqa: E731
        alone = timing.run_timed(call, "cupy-events", a.repeat, 5)[0]
        b2b = timing.run_back_to_back(call, "cupy-events", 5, 10)
        dev = cupy.cuda.Device()
        host = []
        for i in range(a.repeat):
            dev.synchronize()
            t0 = time.perf_counter()
            call(i)
            host.append((time.perf_counter() - t0) * 1e3)
        dev.synchronize()
        med = statistics.median
        rows.append((name, *(1e3 * x for x in (med(alone), med(b2b), med(alone) - med(b2b), med(host)))))
    print(f"{flame.__name__} dispatch gap on {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(f"{'case':24s} {'alone us':>10s} {'b2b us':>10s} {'gap us':>10s} {'host us':>10s}")
    for r in rows:
        print(f"{r[0]:24s} {r[1]:10.1f} {r[2]:10.1f} {r[3]:10.1f} {r[4]:10.1f}")


if __name__ == "__main__":
    main()
