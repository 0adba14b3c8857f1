"""permute kernels on one GPU: each case's kernel (codegen/transpose.py: a tiled shared-memory transpose
when the innermost dim moves, a copy of vector runs when it stays) and the plain index-mapping copy it
replaces, checked bit for bit against NumPy's transpose and timed against a device copy of the same
bytes.

    python3 -m benchmarks.scripts.transpose [--reps 50]

Bytes: the tensor read once and written once. Times: CUDA events around each launch, median of --reps
after 5 warm-ups. Outputs are poisoned (all bits set) before the checked launch.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from flame.runtime.profile import median_event_ms  # noqa: E402

CASES = [  # (input shape, perm, dtype)
    ((64, 128, 4096), (0, 2, 1), "bf16"),  # NCHW -> NHWC of the ResNet step, H*W flattened
    ((64, 4096, 128), (0, 2, 1), "bf16"),  # and back
    ((64, 128, 64, 64), (0, 2, 3, 1), "bf16"),  # NCHW -> NHWC: the profile's permute_bf16_64x64x64x128
    ((64, 64, 64, 128), (0, 3, 1, 2), "bf16"),  # NHWC -> NCHW
    ((64, 64, 64, 128), (0, 2, 3, 1), "bf16"),
    ((64, 128, 64, 64), (0, 2, 3, 1), "f32"),
    ((64, 64, 64, 128), (0, 3, 1, 2), "f32"),
    ((64, 64, 64, 128), (0, 2, 3, 1), "f32"),
    ((3, 1000, 77), (0, 2, 1), "f32"),  # odd extents: partial tiles, scalar reads
    ((3, 1000, 77), (0, 2, 1), "bf16"),
    ((8, 16, 1024, 64), (0, 2, 1, 3), "bf16"),  # attention head split: the innermost dim stays
    ((8, 1024, 16, 64), (0, 2, 1, 3), "f32"),
]
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def permute_op(shape: tuple[int, ...], perm: tuple[int, ...], dtype: str):
    from flame.ir import Builder, Graph, TensorType
    from flame.ir.dtypes import dtype_of

    g = Graph("permute")
    x = g.add_input(TensorType(tuple(shape), dtype_of(dtype)))
    Builder(g).permute(x, perm=list(perm))
    return g.ops[-1]


def random_bits(shape, dtype: str, rng) -> np.ndarray:
    """Random bit patterns of dtype's size (0/1 bytes for bool: other bytes are not valid bools)."""
    from flame.ir.dtypes import dtype_of

    size = dtype_of(dtype).np_dtype.itemsize
    if dtype == "bool":
        return rng.integers(0, 2, shape, dtype=np.uint8)
    return rng.integers(0, np.iinfo(_BITS[size]).max, shape, dtype=_BITS[size], endpoint=True)


def launcher(kernel, x, out):
    """A function launching `kernel` (loaded with CuPy) on device arrays x -> out."""
    import cupy

    from flame.codegen import nvrtc

    mod = cupy.cuda.function.Module()
    mod.load(nvrtc.compile_cubin(kernel.source, nvrtc.device_arch()))
    fn = mod.get_function(kernel.name)
    return functools.partial(fn, (kernel.grid,), (kernel.block,), (x, out))


def check(kernel, shape, perm, dtype: str, offset: int = 0, rng=None) -> str:
    """Run kernel once on random bits (buffers `offset` elements past an aligned start: the scalar
    fallback when offset breaks the vectors' alignment) into a poisoned output; 'exact' or what differs."""
    import cupy

    a = random_bits(shape, dtype, rng or np.random.default_rng(0))
    want = np.ascontiguousarray(np.transpose(a, perm))
    x = cupy.asarray(np.concatenate([np.zeros(offset, a.dtype), a.ravel()]))[offset:]
    out = cupy.full(a.size + offset, np.iinfo(a.dtype).max, a.dtype)[offset:]
    launcher(kernel, x, out)()
    got = cupy.asnumpy(out).reshape(want.shape)
    bad = int((got != want).sum())
    return "exact" if not bad else f"{bad} of {want.size} elements differ"


def _row(label, kernel, shape, perm, dtype, reps, copy_ms):
    import cupy

    a = cupy.asarray(random_bits(shape, dtype, np.random.default_rng(1)))
    out = cupy.empty_like(a)
    ok = check(kernel, shape, perm, dtype)
    ms = median_event_ms(launcher(kernel, a, out), reps, warmup=5)
    nbytes = 2 * a.nbytes
    return (f"{list(shape)}", f"{perm}", dtype, label, kernel.grid, ms * 1e3, nbytes / ms / 1e6, copy_ms / ms * 100, ok)


def main() -> None:
    import cupy

    from flame.codegen import lower, single
    from flame.codegen.elementwise import render_map
    from flame.codegen.views import of_map
    from flame.ir.indexmap import permute_map

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    opts = ap.parse_args()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    rows = []
    for shape, perm, dtype in CASES:
        op = permute_op(shape, perm, dtype)
        a = cupy.empty(op.out.type.numel * op.out.dtype.itemsize, np.uint8)
        b = cupy.empty_like(a)
        copy_ms = median_event_ms(functools.partial(cupy.copyto, b, a), opts.reps, warmup=5)
        (new,) = lower(single(op))
        view = of_map(permute_map(op), op.inputs[0].shape)
        (old,) = render_map(op, [view], "a0", op.out.dtype, what="index-mapping copy", raw=True)
        for label, k in (("new", new), ("general", old)):
            rows.append(_row(label, k, shape, perm, dtype, opts.reps, copy_ms))
            print(*rows[-1], flush=True)
        rows.append(
            (f"{list(shape)}", f"{perm}", dtype, "copy", "", copy_ms * 1e3, 2 * a.nbytes / copy_ms / 1e6, 100.0, "")
        )
    print("\n| shape | perm | dtype | kernel | grid | us | GB/s | % of copy | check |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.1f} | {r[6]:.0f} | {r[7]:.1f}% | {r[8]} |")


if __name__ == "__main__":
    main()
