"""A flash-attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a), checked
against PyTorch and timed beside PyTorch's SDPA backends (cuDNN, FlashAttention-2), one process:

    PYTHONPATH=. python3 -m benchmarks.scripts.flash_wgmma [B H T] [--wgs=2,3]

bf16, head dim 64, causal. Each block holds WGS warpgroups of 64 query rows; K and V tiles of BN keys
stream through shared memory (cp.async, double-buffered) in the 128-byte swizzled layout wgmma reads;
S = Q K^T takes both operands from shared memory, O += P V takes P from registers (S's accumulators,
rounded to bf16) and V from shared memory transposed; the online softmax runs in f32 on the
accumulators (exp2, the scale folded in). No warp specialisation: every thread copies. The same form is
the generated forward under FLAME_FLASH_WGMMA=1 (codegen/flash_attention.py); what it measured on an
H100: benchmarks/results/2026-12-07-H100-delayed-casts-wgmma/.
"""

from __future__ import annotations

import math
import sys
import time

from benchmarks.scripts.cudnn_attention_probe import timed

SOURCE = r"""
#include <cuda_bf16.h>
#include <math_constants.h>
typedef __nv_bfloat16 T;
constexpr int D = 64, BN = 128, WGS = __WGS__, BM = 64 * WGS, THREADS = 128 * WGS;
constexpr long long L = __L__LL, S = __S__LL;
constexpr float SCALE_LOG2 = __SCALE__f * 1.4426950408889634f;  // softmax scale times log2(e)
constexpr int TILE = BN * 128;  // bytes of a K or V tile: BN rows of 64 bf16 (128 bytes)

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// a wgmma matrix descriptor of a tile in the 128-byte swizzled layout (rows of 128 bytes, 8-row groups
// 1024 bytes apart, 1024-byte aligned): start address, leading offset (unused: 16 bytes), stride offset
// 1024 bytes, swizzle mode 1 (128 bytes)
__device__ __forceinline__ unsigned long long desc128(const void* p, unsigned long long lbo = 16,
                                                     unsigned long long sbo = 1024) {
  const unsigned long long a = smem_u32(p);
  return ((a & 0x3FFFFull) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (1ull << 62);
}
// V (B of O += P V, rows of 64 columns: MN-major) in the same layout: which descriptor field holds the
// stride between 8-row groups along K is a variant (V_LBO, V_SBO)

__device__ __forceinline__ void cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" : : "r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" : : : "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" : : : "memory"); }
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" : : : "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" : : : "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" : : : "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" : : : "memory"); }

// rows [r0, r0 + R) of a [total, 64] bf16 tensor into a swizzled tile (zeros past total)
template <int R>
__device__ __forceinline__ void load_tile(unsigned char* dst, const T* src, long long r0, long long total, int tid) {
#pragma unroll
  for (int e = tid; e < R * 8; e += THREADS) {
    const int r = e >> 3, c = e & 7;
    unsigned char* d = dst + r * 128 + ((c ^ (r & 7)) << 4);
    if (r0 + r < total) cp16(d, src + (r0 + r) * D + c * 8);
    else *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
  }
}

__device__ __forceinline__ unsigned pack2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}

#define R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
              "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d[64] (+)= A (64 x 16, shared) * B^T (B: 128 x 16, shared, K-major)
__device__ __forceinline__ void mma_s(float* d, unsigned long long da, unsigned long long db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56)
      : "l"(da), "l"(db), "r"(accumulate));
}

// d[32] += A (64 x 16, registers) * B (16 x 64, shared, MN-major: rows of 64 columns)
__device__ __forceinline__ void mma_o(float* d, const unsigned* a, unsigned long long db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
      : R8(0), R8(8), R8(16), R8(24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) flash_fwd_wgmma(const T* __restrict__ q,
    const T* __restrict__ k,
    const T* __restrict__ v, T* __restrict__ out, float* __restrict__ stats) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  unsigned char* sQ = smem;                 // BM rows
  unsigned char* sK = sQ + BM * 128;        // two tiles
  unsigned char* sV = sK + 2 * TILE;        // two tiles
  const int tiles = (int)((L + BM - 1) / BM);
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (long long)(tiles - 1 - (int)(blockIdx.x % tiles)) * BM;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const T* qb = q + bh * L * D;
  const T* kb = k + bh * S * D;
  const T* vb = v + bh * S * D;
  const long long hi = q0 + BM < S ? q0 + BM : S;  // causal: keys up to the block's last query
  const int ntiles = (int)((hi + BN - 1) / BN);
  load_tile<BM>(sQ, qb, q0, L, tid);
  if (ntiles > 0) {
    load_tile<BN>(sK, kb, 0, S, tid);
    load_tile<BN>(sV, vb, 0, S, tid);
  }
  cp_commit();
  float o[32], m[2], l[2];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.0f;
  m[0] = m[1] = -CUDART_INF_F;
  l[0] = l[1] = 0.0f;
  const long long row0 = q0 + wg * 64 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
  const unsigned long long dq = desc128(sQ + wg * 64 * 128);
  for (int it = 0; it < ntiles; ++it) {
    const long long k0 = (long long)it * BN;
    cp_wait_all();
    fence_async();
    __syncthreads();
    if (it + 1 < ntiles) {
      load_tile<BN>(sK + ((it + 1) & 1) * TILE, kb, k0 + BN, S, tid);
      load_tile<BN>(sV + ((it + 1) & 1) * TILE, vb, k0 + BN, S, tid);
      cp_commit();
    }
    const unsigned char* cK = sK + (it & 1) * TILE;
    const unsigned char* cV = sV + (it & 1) * TILE;
    float s[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = 0.0f;
    const unsigned long long dk = desc128(cK);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) mma_s(s, dq + 2 * kk, dk + 2 * kk, kk);
    wg_commit();
    wg_wait0();
    // mask (causal, keys past S) where the tile reaches past this warp's first row
    const bool partial = k0 + BN - 1 > row0 - g || k0 + BN > S;
    float mx[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
    for (int jb = 0; jb < BN / 8; ++jb)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float x = s[4 * jb + c] * SCALE_LOG2;
        if (partial) {
          const long long i = row0 + 8 * (c >> 1), j = k0 + 8 * jb + 2 * t + (c & 1);
          if (j > i || j >= S) x = -CUDART_INF_F;
        }
        s[4 * jb + c] = x;
        mx[c >> 1] = fmaxf(mx[c >> 1], x);
      }
    float shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float mnew = fmaxf(m[r], mx[r]);
      shift[r] = mnew == -CUDART_INF_F ? 0.0f : mnew;
      const float alpha = exp2f(m[r] - shift[r]);
      l[r] *= alpha;
#pragma unroll
      for (int jb = 0; jb < 8; ++jb) {
        o[4 * jb + 2 * r] *= alpha;
        o[4 * jb + 2 * r + 1] *= alpha;
      }
      m[r] = mnew;
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      s[i] = exp2f(s[i] - shift[(i >> 1) & 1]);
      l[(i >> 1) & 1] += s[i];
    }
    unsigned a[BN / 16][4];  // P as the A fragments of the BN / 16 products, all packed before the first
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) a[kk][x] = pack2(s[8 * kk + 2 * x], s[8 * kk + 2 * x + 1]);
    const unsigned long long dv = desc128(cV, __V_LBO__ull, __V_SBO__ull);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) mma_o(o, a[kk], dv + kk * 128);  // 16 rows of V: 2048 bytes
    wg_commit();
    wg_wait0();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const long long i = row0 + 8 * r;
    if (i >= L) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int jb = 0; jb < 8; ++jb)
      *reinterpret_cast<unsigned*>(out + (bh * L + i) * D + 8 * jb + 2 * t) =
          pack2(o[4 * jb + 2 * r] * inv, o[4 * jb + 2 * r + 1] * inv);
    if (t == 0) stats[bh * L + i] = sum > 0.0f ? (m[r] + log2f(sum)) * 0.6931471805599453f : -CUDART_INF_F;
  }
}
"""

BN = 128


VARIANTS = {"sbo": (16, 1024), "lbo": (1024, 16)}  # V's descriptor: (leading, stride) byte offsets


def render(length: int, wgs: int, variant: str = "sbo") -> str:
    lbo, sbo = VARIANTS[variant]
    return (
        SOURCE.replace("__WGS__", str(wgs))
        .replace("__V_LBO__", str(lbo))
        .replace("__V_SBO__", str(sbo))
        .replace("__L__", str(length))
        .replace("__S__", str(length))
        .replace("__SCALE__", repr(1.0 / math.sqrt(64)))
    )


def smem_bytes(wgs: int) -> int:
    return 64 * wgs * 128 + 4 * BN * 128 + 1024


def compile_kernel(length: int, wgs: int, variant: str = "sbo"):
    import cupy

    from flame.codegen import nvrtc

    cubin = nvrtc.compile_cubin(render(length, wgs, variant), "sm_90a", "flash_fwd_wgmma")
    mod = cupy.cuda.function.Module()
    mod.load(cubin)
    fn = mod.get_function("flash_fwd_wgmma")
    cupy.cuda.driver.funcSetAttribute(fn.ptr, 8, smem_bytes(wgs))
    return mod, fn


def main(argv: list[str]) -> None:
    import cupy
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    nums = [int(a) for a in argv if a.isdigit()]
    b, h, length = nums if len(nums) == 3 else (8, 16, 4096)
    wgs_list = [int(x) for x in next((a.split("=")[1] for a in argv if a.startswith("--wgs=")), "2,3").split(",")]
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, length, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    s = (q.float() @ k.float().transpose(-1, -2)) / 8.0 if length <= 2048 else None
    if s is not None:
        s = s.masked_fill(torch.ones(length, length, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
        lse_ref = torch.logsumexp(s, -1)
    flops = 4 * b * h * length * length * 64 / 2
    rows = []
    for wgs, variant in [(w, x) for w in wgs_list for x in VARIANTS]:
        t0 = time.perf_counter()
        mod, fn = compile_kernel(length, wgs, variant)
        compile_s = time.perf_counter() - t0
        out = torch.full_like(q, float("nan"))
        stats = torch.full((b, h, length), float("nan"), device="cuda", dtype=torch.float32)
        grid = (b * h * -(-length // (64 * wgs)),)
        ptrs = [cupy.uint64(x.data_ptr()) for x in (q, k, v, out, stats)]

        def run(fn=fn, grid=grid, ptrs=ptrs, wgs=wgs):
            fn(
                grid,
                (128 * wgs,),
                ptrs,
                shared_mem=smem_bytes(wgs),
                stream=cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream),
            )

        run()
        torch.cuda.synchronize()
        err = float((out.float() - ref).norm() / ref.norm())
        nan = bool(torch.isnan(out).any())
        lse_err = float((stats - lse_ref).abs().max()) if s is not None else float("nan")
        us = timed(run, 20) * 1e3
        rows.append(
            (
                f"wgmma, {wgs} WG, V {variant}",
                us,
                flops / us / 1e6,
                f"rel err {err:.2e}, lse {lse_err:.1e}, nan {nan}, compile {compile_s:.2f} s",
            )
        )
    for name, backend in (("torch cuDNN", SDPBackend.CUDNN_ATTENTION), ("torch flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                us = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 20) * 1e3
            rows.append((name, us, flops / us / 1e6, ""))
        except RuntimeError as e:
            rows.append((name, float("nan"), float("nan"), str(e)[:60]))
    print(f"causal forward, bf16, B {b} H {h} T {length} D 64")
    for name, us, tf, note in rows:
        print(f"  {name:24s} {us:9.1f} us  {tf:6.1f} TFLOP/s  {note}")


if __name__ == "__main__":
    main(sys.argv[1:])
