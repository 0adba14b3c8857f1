"""Launch-shape variants of the fused elementwise and row kernels of the benchmark cases, timed on one
GPU against a device copy of the same bytes; every variant's output is checked bit for bit against
the first variant's (the reference kernel: the committed sources in .tune/old/<case>.cu when present,
else the variant listed first).

    python3 -m benchmarks.scripts.tune_fused [--cases elementwise,bias_gelu,...] [--reps 40]

Variants are flame.codegen.Config values (unroll, grid_cap for elementwise kernels; cache_invariant,
min_blocks for row kernels) passed to flame.codegen.lower. Times: CUDA events around each launch,
median of --reps after 5 warm-ups.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from flame.runtime.profile import median_event_ms  # noqa: E402

N_EW, R, C = 64 * 2**20, 8192, 8192

VARIANTS = {  # case group -> [(label, {Config field: value})]
    "map": [("U1 cap8192", dict(unroll=1, grid_cap=8192)), ("U1 nocap", dict(unroll=1, grid_cap=1 << 20)),
            ("U2 nocap", dict(unroll=2, grid_cap=1 << 20)), ("U4 nocap", dict(unroll=4, grid_cap=1 << 20)),
            ("U2 cap8192", dict(unroll=2, grid_cap=8192)), ("U4 cap8192", dict(unroll=4, grid_cap=8192)),
            ("U2 cap1056", dict(unroll=2, grid_cap=1056)), ("U4 cap792", dict(unroll=4, grid_cap=792)),
            ("U4 cap1584", dict(unroll=4, grid_cap=1584))],
    "rows": [("cache mb0", dict(cache_invariant=True, min_blocks=0)),
             ("cache mb3", dict(cache_invariant=True, min_blocks=3)),
             ("cache mb4", dict(cache_invariant=True, min_blocks=4)),
             ("nocache mb0", dict(cache_invariant=False, min_blocks=0)),
             ("nocache mb3", dict(cache_invariant=False, min_blocks=3))],
}


def _cases():
    import flame.nn.functional as F

    x, v = np.zeros((R, C), np.float32), np.zeros((C,), np.float32)
    return {
        "elementwise": ("map", lambda x: F.gelu(x * 1.5 + 0.5) * F.sigmoid(x), [np.zeros((N_EW,), np.float32)]),
        "bias_gelu": ("map", lambda x, b: F.gelu(x + b), [x, v]),
        "softmax": ("rows", lambda x: F.softmax(x, dim=-1), [x]),
        "layer_norm": ("rows", lambda x, w, b: F.layer_norm(x, (C,), w, b, eps=1e-5), [x, v, v]),
        "rms_norm": ("rows", lambda x, w: F.rms_norm(x, (C,), w, eps=1e-6), [x, v]),
    }


def _launcher(source: str, name: str, grid: int, block: int, args):
    import cupy

    from flame.codegen import nvrtc

    mod = cupy.cuda.function.Module()
    mod.load(nvrtc.compile_cubin(source, nvrtc.device_arch()))
    fn = mod.get_function(name)
    return lambda: fn((grid,), (block,), args)


def main() -> None:
    import cupy

    from flame.codegen import Config, lower
    from flame.passes.fuse import fuse
    from tests.passes.fuse_cases import build

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="elementwise,bias_gelu,softmax,layer_norm,rms_norm")
    ap.add_argument("--reps", type=int, default=40)
    opts = ap.parse_args()
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    big = cupy.empty(2**28, np.float32)
    big_out = cupy.empty_like(big)
    ceiling = 2 * big.nbytes / median_event_ms(functools.partial(cupy.copyto, big_out, big), opts.reps, warmup=5) / 1e6
    big = big_out = None
    print(f"copy ceiling (1 GiB copyto): {ceiling:.0f} GB/s", flush=True)
    rows = []
    rng = np.random.default_rng(1)
    for case in opts.cases.split(","):
        kind, fn, arrays = _cases()[case]
        graph, _ = build(fn, *arrays)
        groups = [g for g in fuse(graph).groups if g.ops]
        ins = [cupy.asarray(rng.standard_normal(a.shape, dtype=np.float32)) for a in arrays]
        out = cupy.empty(arrays[0].shape, np.float32)
        nbytes = sum(a.nbytes for a in ins) + out.nbytes
        copy_ms = median_event_ms(functools.partial(cupy.copyto, out, ins[0]), opts.reps, warmup=5)
        ref = None
        variants = [("old", None)] if (ROOT / ".tune/old" / f"{case}.cu").exists() else []
        for label, values in variants + VARIANTS[kind]:
            if values is None:
                text = (ROOT / ".tune/old" / f"{case}.cu").read_text()
                head, source = text.split("\n", 1)
                grid, block = (int(p.split("=")[1]) for p in head[3:].split())
                name = re.search(r"__launch_bounds__\([^)]*\) (\w+)\(", source).group(1)
            else:
                (k,) = [k for g in groups for k in lower(g, Config(**values))]
                source, name, grid, block = k.source, k.name, k.grid, k.block
            launch = _launcher(source, name, grid, block, (*ins, out))
            out.fill(np.nan)
            launch()
            cupy.cuda.runtime.deviceSynchronize()
            got = out.get()
            same = "ref" if ref is None else ("bit-identical" if np.array_equal(got.view(np.uint32),
                                                                                 ref.view(np.uint32)) else "DIFFERS")
            if ref is None:
                ref = got
            finite = bool(np.isfinite(got).all())
            ms = median_event_ms(launch, opts.reps, warmup=5)
            rows.append((case, label, grid, block, ms, nbytes / ms / 1e6 / ceiling * 100, copy_ms / ms * 100,
                         same if finite else same + " NONFINITE"))
            print(*rows[-1], flush=True)
        rows.append((case, "cupy copy", 0, 0, copy_ms, 2 * out.nbytes / copy_ms / 1e6 / ceiling * 100, 100.0, ""))
        ins = out = launch = None
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"\n| case | variant | grid | block | ms | % of copy ({ceiling:.0f} GB/s) | % of same-size copy | check |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.4f} | {r[5]:.1f}% | {r[6]:.1f}% | {r[7]} |")


if __name__ == "__main__":
    main()
