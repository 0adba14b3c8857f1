"""Which workspace cuBLASLt's heuristic asks for, per GEMM shape of gpt_block_train / mlp_bf16_train."""

import ctypes

import cupy
import ml_dtypes
import numpy as np
from nvmath.bindings import cublasLt as lt

from flame.runtime import matmul as M

BF = ml_dtypes.bfloat16
SHAPES = {  # (a, b, out, ta, tb, epilogue)
    "qkv fwd  8192x1024 @ 1024x3072": ((8192, 1024), (1024, 3072), (8192, 3072), False, False, "bias"),
    "fc fwd   8192x1024 -> 4096": ((8192, 1024), (1024, 4096), (8192, 4096), False, False, "bias"),
    "proj fwd 8192x4096 -> 1024": ((8192, 4096), (4096, 1024), (8192, 1024), False, False, "bias"),
    "dX proj  8192x1024 @ 1024x4096": ((8192, 1024), (1024, 4096), (8192, 4096), False, False, "none"),
    "dW proj  1024x8192 @ 8192x4096": ((8192, 1024), (8192, 4096), (1024, 4096), True, False, "none"),
    "dW o     1024x8192 @ 8192x1024": ((8192, 1024), (8192, 1024), (1024, 1024), True, False, "none"),
    "mlp 8192x4096x4096": ((8192, 4096), (4096, 4096), (8192, 4096), False, False, "none"),
    "mlp dW 4096x8192x4096": ((8192, 4096), (8192, 4096), (4096, 4096), True, False, "none"),
}


def probe(a, b, o, ta, tb, ep, limit: int) -> str:
    """The workspace sizes of the heuristic's first algorithms under a workspace limit, and the time of
    one GEMM with the first one."""
    lay = M._layout(a, b, o, ta, tb)
    g = M._Gemm(lay, "bfloat16", ep, (256, 256, 256), limit, 0)
    dt = lt.matmul_heuristic_result_dtype
    rec = np.frombuffer((ctypes.c_char * (len(g.algorithms) * dt.itemsize)).from_address(g.results.ptr), dtype=dt)
    x = cupy.asarray((np.random.standard_normal(a) * 0.1).astype(BF))
    y = cupy.asarray((np.random.standard_normal(b) * 0.1).astype(BF))
    out = cupy.empty(o, BF)
    ws = cupy.empty(max(limit, 256), cupy.uint8)
    bias = cupy.asarray(np.zeros(o[-1], BF))
    kw = {"bias": bias} if ep == "bias" else {}
    for _ in range(3):
        M.matmul_into(out, x, y, ta, tb, ep, workspace=ws, **kw)
    s, e = cupy.cuda.Event(), cupy.cuda.Event()
    s.record()
    for _ in range(20):
        M.matmul_into(out, x, y, ta, tb, ep, workspace=ws, **kw)
    e.record()
    e.synchronize()
    sizes = [int(n) >> 10 for n in rec["workspace_size"][:4]]
    return f"limit {limit >> 20}MiB: ws {sizes} KiB, {cupy.cuda.get_elapsed_time(s, e) / 20 * 1e3:.1f} us"


def main() -> None:
    """One line per GEMM shape: what each workspace limit gives."""
    for name, shape in SHAPES.items():
        row = [probe(*shape, limit) for limit in (32 << 20, 4 << 20, 0)]
        print(name, " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
