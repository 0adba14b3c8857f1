"""Time the generated flash-attention kernels of plain causal attention one by one (CUDA events, median of
10 after 3 warm-up launches): the forward, the backward's prep, main and dQ kernels, and the main
backward kernel without its dQ products, without its dK / dV products and without both, which says where
the backward's time goes. Inputs are random (the timing does not depend on their values); the kernels
are rendered for bf16 [B, H, T, D] as a training step's plan renders them for this GPU (so
FLAME_FLASH_WGMMA=1 times the Hopper forward on an H100 or H200).

    FLAME_ATTENTION=flash python3 -m benchmarks.scripts.flash_kernels      # B 8, H 16, T 4096, D 64
    T=1024 D=128 python3 -m benchmarks.scripts.flash_kernels
    FLAME_FLASH_WGMMA=1 python3 -m benchmarks.scripts.flash_kernels
"""

from __future__ import annotations

import os

import numpy as np

import flame
import flame.nn.functional as F
from flame.codegen import flash_attention
from flame.codegen.nvrtc import compile_cubin, device_arch
from flame.ir.ops.attention import BACKWARD, FORWARD

CUTS = {  # (first line kept out, first line kept again) of the main backward kernel's pipelined source
    "dQ": ("    unsigned dsa[BN / 16][4];", "    if (more && tid < BQ)"),
    "dK, dV": ("    for (int kq = 0; kq < BQ / 16; ++kq) {", "    __syncthreads();  // dS^T"),
}


def kernels(b: int, h: int, t: int, d: int, arch: str = ""):
    """The forward, prep, main and dQ kernels of causal attention's training step at bf16 [b, h, t, d], the
    forward as planned for `arch` (flash_attention.lower_forward)."""
    qkv = [flame.tensor(np.zeros((b, h, t, d), np.float32)).to("bf16") for _ in range(3)]

    def loss(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).float().sum()

    g = flame.compile(flame.value_and_grad(loss, (0, 1, 2))).optimized(*qkv)
    ops = {op.name: op for op in g.ops}
    forward = flash_attention.lower_forward(ops[FORWARD], True, arch=arch)[0]
    return (forward, *flash_attention.lower_backward(ops[BACKWARD]))


def without(source: str, *parts: str) -> str:
    for part in parts:
        first, again = CUTS[part]
        i = source.index(first)
        source = source[:i] + source[source.index(again, i):]
    return source


def main() -> None:
    import cupy as cp

    b, h, t, d = 8, 16, int(os.environ.get("T", "4096")), int(os.environ.get("D", "64"))
    arch = device_arch()
    fwd, prep, main_, dq = kernels(b, h, t, d, arch)

    def bf16(n):
        return (cp.random.standard_normal(n, dtype=cp.float32).view(cp.uint32) >> 16).astype(cp.uint16)

    n = b * h * t * d
    q, k, v, o, go = (bf16(n) for _ in range(5))
    lse = cp.full((b * h * t,), 6.0, cp.float32)
    grads, out = cp.zeros((3 * n,), cp.uint16), cp.zeros((n,), cp.uint16)
    scratch = cp.zeros((main_.scratch // 4 + 16,), cp.float32)

    def timed(kern, args, source=None) -> float:
        mod = cp.cuda.function.Module()
        mod.load(compile_cubin(source or kern.source, arch))
        fn = mod.get_function(kern.name)
        if kern.smem > 48 * 1024:
            cp.cuda.driver.funcSetAttribute(fn.ptr, 8, kern.smem)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        times = []
        for i in range(13):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn((kern.grid,), (kern.block,), args, shared_mem=kern.smem)
            end.record()
            end.synchronize()
            if i >= 3:
                times.append(cp.cuda.get_elapsed_time(start, end) * 1000)
        return float(np.median(times))

    back = (q, k, v, o, go, lse, grads, scratch)
    rows = [("forward", timed(fwd, (q, k, v, out, lse))), ("backward prep", timed(prep, back)),
            ("backward main", timed(main_, back)), ("backward dQ", timed(dq, back))]
    if "cp.async" in main_.source:
        for parts in (("dQ",), ("dK, dV",), ("dQ", "dK, dV")):
            rows.append((f"  main without {' and '.join(parts)}", timed(main_, back, without(main_.source, *parts))))
    flops = 4 * b * h * (t * (t + 1) // 2) * d
    print(f"causal attention bf16 [{b}, {h}, {t}, {d}] on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: "
          f"forward {flops:.3e} FLOP, backward {2.5 * flops:.3e}")
    for name, us in rows:
        print(f"  {name:<34} {us:9.1f} us")


if __name__ == "__main__":
    main()
