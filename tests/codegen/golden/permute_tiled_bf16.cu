// ---- kernel permute_bf16_2x77x40_tiled_b92da4c6: grid=12 block=256 scratch=0
// flame kernel for IR op: %1 = permute %0 {perm=[0, 2, 1]} : bf16[2,77,40]
//   inputs: %0: bf16[2,40,77]
//   tiled transpose through shared memory: 40 x 77 per batch of 2, 32 x 32 tiles
#include <cuda_bf16.h>

#ifndef FLAME_VEC
#define FLAME_VEC
// N elements moved as one aligned load/store of N * sizeof(T) bytes
template <typename T, int N> struct __align__(sizeof(T) * N) flame_vec { T v[N]; };
#endif
extern "C" __global__ void __launch_bounds__(256) permute_bf16_2x77x40_tiled_b92da4c6(const __nv_bfloat16* __restrict__ in0, __nv_bfloat16* __restrict__ out) {
  typedef unsigned int idx_t;
  typedef int off_t;
  // tile[j][i]; 2 element(s) of padding per row spread both phases' accesses over the banks
  __shared__ __nv_bfloat16 tile[32][34];
  const bool vec = reinterpret_cast<unsigned long long>(in0) % 2 == 0 && reinterpret_cast<unsigned long long>(out) % 16 == 0;
  for (idx_t t = blockIdx.x; t < 12u; t += gridDim.x) {
    idx_t q = t;
    const off_t j0 = (off_t)(q % 2u) * 32; q /= 2u;
    const off_t i0 = (off_t)(q % 3u) * 32; q /= 3u;
    off_t src = 0, dst = 0;  // the batch coordinates' offsets in the input and the output
    src += (off_t)q * 3080; dst += (off_t)q * 3080;
    if (vec) {  // 1 / 8 element(s) per read / write: both pointers aligned to them
      {
        const int rx = threadIdx.x % 32, ry = threadIdx.x / 32;
        const off_t i = i0 + rx * 1;
        flame_vec<__nv_bfloat16, 1> a[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int r = ry + k * 8;
          if (r < 32 && i < 77 && j0 + r < 40)
            a[k] = *reinterpret_cast<const flame_vec<__nv_bfloat16, 1>*>(in0 + src + (j0 + r) * 77 + i);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int r = ry + k * 8;
          if (r < 32 && i < 77 && j0 + r < 40) {
#pragma unroll
            for (int e = 0; e < 1; ++e) tile[r][rx * 1 + e] = a[k].v[e];
          }
        }
      }
      __syncthreads();
      {
        const int wx = threadIdx.x % 4, wy = threadIdx.x / 4;
        const off_t j = j0 + wx * 8;
#pragma unroll
        for (int k = 0; k < 1; ++k) {
          const int r = wy + k * 64;
          if (r < 32 && i0 + r < 77 && j < 40) {
            flame_vec<__nv_bfloat16, 8> b;
#pragma unroll
            for (int e = 0; e < 8; ++e) b.v[e] = tile[wx * 8 + e][r];
            *reinterpret_cast<flame_vec<__nv_bfloat16, 8>*>(out + dst + (i0 + r) * 40 + j) = b;
          }
        }
      }
    } else {
      {
        const int rx = threadIdx.x % 32, ry = threadIdx.x / 32;
        const off_t i = i0 + rx * 1;
        flame_vec<__nv_bfloat16, 1> a[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int r = ry + k * 8;
          if (r < 32 && i < 77 && j0 + r < 40)
            a[k] = *reinterpret_cast<const flame_vec<__nv_bfloat16, 1>*>(in0 + src + (j0 + r) * 77 + i);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int r = ry + k * 8;
          if (r < 32 && i < 77 && j0 + r < 40) {
#pragma unroll
            for (int e = 0; e < 1; ++e) tile[r][rx * 1 + e] = a[k].v[e];
          }
        }
      }
      __syncthreads();
      {
        const int wx = threadIdx.x % 32, wy = threadIdx.x / 32;
        const off_t j = j0 + wx * 1;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int r = wy + k * 8;
          if (r < 32 && i0 + r < 77 && j < 40) {
            flame_vec<__nv_bfloat16, 1> b;
#pragma unroll
            for (int e = 0; e < 1; ++e) b.v[e] = tile[wx * 1 + e][r];
            *reinterpret_cast<flame_vec<__nv_bfloat16, 1>*>(out + dst + (i0 + r) * 40 + j) = b;
          }
        }
      }
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
}
