"""The multi-tensor AdamW update of the adamw_multi_tensor case (gpt_train's parameter set: 52 bf16
tensors from [768] to [8192, 768]) as one kernel, in schedule variants, timed on one GPU against a
device copy; every variant's outputs are checked bit for bit against the side-by-side kernel's.

    python3 -m benchmarks.scripts.multi_tensor [--reps 50] [--variants side,b1024,b1024u2,b512u4]

side: each tensor on its own blocks (Config(balanced=0)); bN: the balanced flat schedule
(codegen/fused.py _lower_balanced), one step per block, N threads per multiprocessor asked resident
(Config.balanced_threads); b1024sK: K steps per block; waveN: the one-wave form (balanced_steps=0);
bNuK: with K items per thread per step, all their loads first (Config.balanced_unroll); b1024nocs:
without the streaming cache hints (Config.balanced_streaming); b1024fdiv and b1024nodiv: probes of
what the arithmetic costs (PROBES; their results differ by design).
The first variant is the reference of the bit check (side, unless --variants says otherwise); side
rounds some elements differently (up to 9 ulp of 201M in the mlp set, 2026-11-27): it is not a
bit-for-bit reference of the balanced kernels.
--set mlp: mlp_bf16_train's parameters instead (4 x [4096, 4096] + 4 x [4096]); gpt2x, gptbig: see --help.
Bytes: every input tensor read once, every output written once (the 0-d scalars aside). Times: CUDA
events around each replay of a CUDA graph of one launch (as a plan runs it: a direct launch of a
kernel of 472 pointers also times CuPy packing them, ~30 us on an H200 host), median of --reps after
5 warm-ups; the copies (two pointers) are launched directly (captured, the 1 GiB one ran at 2691
GB/s against 4084 launched, H200, 2026-11-29).
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

VARIANTS = {
    "side": dict(balanced=0),
    "b512": dict(balanced_threads=512),
    "b768": dict(balanced_threads=768),
    "b1024": dict(balanced_threads=1024),
    "b1536": dict(balanced_threads=1536),
    "b2048": dict(balanced_threads=2048),
    "b1024nocs": dict(balanced_streaming=False),
    "wave1024": dict(balanced_threads=1024, balanced_steps=0),
    "wave512": dict(balanced_threads=512, balanced_steps=0),
    "b1024s2": dict(balanced_steps=2),
    "b1024s4": dict(balanced_steps=4),
    "b1024s8": dict(balanced_steps=8),
}
# several items per thread per step; registers (NVRTC 12.9, sm_90, bf16 update): b1024u2/u4 spill
# (64 registers), b768u2 80 (84 bytes spilled), b512u2 102 (none), b512u4 128 (186 bytes spilled)
VARIANTS.update(
    {
        f"b{t}u{u}": dict(balanced_threads=t, balanced_unroll=u)
        for t, u in [(1024, 2), (1024, 4), (768, 2), (512, 2), (512, 4)]
    }
)


# probes, not schedules: b1024's source with its divisions made approximate (__fdividef) or made
# multiplications and its square root dropped (wrong results: what the arithmetic costs). H200,
# 2026-11-27, one-wave schedule: gpt set 186.6 / 181.1 / 177.1 us, mlp set 292.1 / 280.0 / 272.4 us:
# the division and square root are not what kept the update at 64-78% of copy; the one-wave chunks
# were (Config.balanced_steps).
_DIV = re.compile(r"\((t\d+) / (t\d+)\)")
PROBES = {
    "b1024fdiv": lambda s: _DIV.sub(r"__fdividef(\1, \2)", s),
    "b1024nodiv": lambda s: _DIV.sub(r"(\1 * \2)", s).replace("sqrtf(", "("),
}
VARIANTS.update({name: dict(balanced_threads=1024) for name in PROBES})


def _graphed(launch):
    """launch captured in a CUDA graph: a callable that replays it on the current stream."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
    return lambda: graph.launch(cupy.cuda.get_current_stream())


def _bits(a):
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _compare(got, ref) -> str:
    """'bit-identical', or how many elements differ and by how many units in the last place."""
    diff = [np.abs(g.astype(np.int64) - r.astype(np.int64)) for g, r in zip(got, ref)]
    n = sum(int((d != 0).sum()) for d in diff)
    if not n:
        return "bit-identical"
    return f"{n} of {sum(d.size for d in diff)} elements differ, by up to {max(int(d.max()) for d in diff)} ulp"


def main() -> None:
    import cupy
    import ml_dtypes

    from flame.bench.run import select
    from flame.codegen import Config, lower, nvrtc
    from flame.codegen.fused import group_inputs
    from flame.passes.fuse import fuse
    from tests.passes.fuse_cases import multi_adamw

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--set",
        choices=("gpt", "gpt2x", "gptbig", "mlp"),
        default="gpt",
        help="gpt: adamw_multi_tensor's 52 tensors (gpt2x: each twice as long; gptbig: its 2-D ones "
        "alone); mlp: mlp_bf16_train's 4 x [4096, 4096] + 4 x [4096]",
    )
    opts = ap.parse_args()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    big = cupy.empty(2**28, np.float32)
    big_out = cupy.empty_like(big)
    copy_ms = median_event_ms(functools.partial(cupy.copyto, big_out, big), opts.reps, warmup=5)
    ceiling = 2 * big.nbytes / copy_ms / 1e6
    big = big_out = None
    print(f"copy ceiling (1 GiB copyto): {ceiling:.0f} GB/s", flush=True)

    (case,) = select("adamw_multi_tensor")
    shapes = [i.shape for i in case.inputs(case.sizes(False)).values() if i.state]
    shapes = {
        "gpt": shapes,
        "gpt2x": [(2 * s[0], *s[1:]) for s in shapes],
        "gptbig": [s for s in shapes if len(s) == 2],
        "mlp": [(4096, 4096), (4096,)] * 4,
    }[opts.set]
    groups = fuse(multi_adamw(shapes, "bf16")[0]).groups
    grp = max(groups, key=lambda g: sum(v.type.numel for v in g.outputs))  # the update (not the 0-d work)
    rng = np.random.default_rng(1)

    def device(v, fill=None):
        x = (
            np.full(v.shape, fill, np.float32)
            if fill is not None
            else (rng.uniform(0.5, 1.0, v.shape) if not v.shape else np.abs(rng.standard_normal(v.shape)) * 1e-2 + 1e-3)
        )
        x = np.asarray(x).astype(v.dtype.np_dtype)
        return cupy.asarray(x.view(np.uint16) if x.dtype == np.dtype(ml_dtypes.bfloat16) else x)

    ins = [device(v) for v in group_inputs(grp)]
    outs = [device(v, np.nan) for v in grp.outputs]
    nbytes = sum(a.nbytes for a in ins if a.ndim) + sum(a.nbytes for a in outs)
    print(
        f"update: {len(shapes)} tensors, {sum(v.type.numel for v in grp.outputs) // 3} elements each of "
        f"p, m, v; {nbytes / 1e6:.0f} MB moved",
        flush=True,
    )
    src = cupy.empty(nbytes // 8, np.float32)  # a copy moving the update's bytes (half read, half written)
    dst = cupy.empty_like(src)
    same = median_event_ms(functools.partial(cupy.copyto, dst, src), opts.reps, warmup=5)
    src = dst = None
    print(f"a copy of the same bytes: {same * 1e3:.1f} us ({nbytes / same / 1e6:.0f} GB/s)", flush=True)
    rows, ref = [], None
    for label in opts.variants.split(","):
        (k,) = lower(grp, Config(**VARIANTS[label]))
        mod = cupy.cuda.function.Module()
        mod.load(nvrtc.compile_cubin(PROBES.get(label, str)(k.source), nvrtc.device_arch()))
        fn = mod.get_function(k.name)
        launch = functools.partial(fn, (k.grid,), (k.block,), (*ins, *outs))
        for o in outs:
            o.fill(0x7FC0 if o.dtype == np.uint16 else np.nan)
        launch()
        cupy.cuda.runtime.deviceSynchronize()
        got = [_bits(o.get()) for o in outs]
        check = "ref" if ref is None else _compare(got, ref)
        ref = ref or got
        ms = median_event_ms(_graphed(launch), opts.reps, warmup=5)
        rows.append((label, k.grid, k.block, ms * 1e3, nbytes / ms / 1e6, nbytes / ms / 1e6 / ceiling * 100, check))
        print(*rows[-1], flush=True)
    print(f"\n| variant | grid | block | us | GB/s | % of copy ({ceiling:.0f} GB/s) | check |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1f} | {r[4]:.0f} | {r[5]:.1f}% | {r[6]} |")


if __name__ == "__main__":
    main()
