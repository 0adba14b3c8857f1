"""Which workspace cuBLASLt's heuristic asks for, per GEMM shape of gpt_block_train / mlp_bf16_train."""
import ctypes
import ml_dtypes
BF = ml_dtypes.bfloat16
import numpy as np, cupy
from nvmath.bindings import cublasLt as lt
from flame.runtime import matmul as M
shapes = {  # (a, b, out, ta, tb, epilogue)
  "qkv fwd  8192x1024 @ 1024x3072": ((8192,1024),(1024,3072),(8192,3072),False,False,"bias"),
  "fc fwd   8192x1024 -> 4096": ((8192,1024),(1024,4096),(8192,4096),False,False,"bias"),
  "proj fwd 8192x4096 -> 1024": ((8192,4096),(4096,1024),(8192,1024),False,False,"bias"),
  "dX proj  8192x1024 @ 1024x4096": ((8192,1024),(1024,4096),(8192,4096),False,False,"none"),
  "dW proj  1024x8192 @ 8192x4096": ((8192,1024),(8192,4096),(1024,4096),True,False,"none"),
  "dW o     1024x8192 @ 8192x1024": ((8192,1024),(8192,1024),(1024,1024),True,False,"none"),
  "mlp 8192x4096x4096": ((8192,4096),(4096,4096),(8192,4096),False,False,"none"),
  "mlp dW 4096x8192x4096": ((8192,4096),(8192,4096),(4096,4096),True,False,"none"),
}
for name, (a, b, o, ta, tb, ep) in shapes.items():
    lay = M._layout(a, b, o, ta, tb)
    row = []
    for limit in (32 << 20, 4 << 20, 0):
        g = M._Gemm(lay, "bfloat16", ep, (256, 256, 256), limit, 0)
        dt = lt.matmul_heuristic_result_dtype
        rec = np.frombuffer((ctypes.c_char * (len(g.algorithms) * dt.itemsize)).from_address(g.results.ptr), dtype=dt)
        # time the first algorithm
        A = cupy.asarray((np.random.standard_normal(a) * 0.1).astype(BF))
        B = cupy.asarray((np.random.standard_normal(b) * 0.1).astype(BF))
        O = cupy.empty(o, BF)
        W = cupy.empty(max(limit, 256), cupy.uint8)
        bias = cupy.asarray(np.zeros(o[-1], BF))
        kw = {"bias": bias} if ep == "bias" else {}
        for _ in range(3): M.matmul_into(O, A, B, ta, tb, ep, workspace=W, **kw)
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        for _ in range(20): M.matmul_into(O, A, B, ta, tb, ep, workspace=W, **kw)
        e.record(); e.synchronize()
        row.append(f"limit {limit>>20}MiB: ws {[int(x) >> 10 for x in rec['workspace_size'][:4]]} KiB, {cupy.cuda.get_elapsed_time(s, e)/20*1e3:.1f} us")
    print(name, " | ".join(row), flush=True)
