// ---- kernel add_f16_4x5_bcast_a840e35e: grid=1 block=32 scratch=0
// flame kernel for IR op: %2 = add %0, %1 : f16[4,5]
//   inputs: %0: f16[4,5], %1: f16[5]
#include <cuda_fp16.h>

extern "C" __global__ void __launch_bounds__(32) add_f16_4x5_bcast_a840e35e(const __half* __restrict__ in0, const __half* __restrict__ in1, __half* __restrict__ out) {
  typedef unsigned int idx_t;
  typedef int off_t;
  const idx_t n = 20u;
  const idx_t step = (idx_t)gridDim.x * blockDim.x;
  const idx_t first = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (idx_t i = first; i < n; i += step) {
    idx_t cr = i;
    const off_t c1 = (off_t)(cr % 5u); cr /= 5u;
    const off_t c0 = (off_t)cr;
    const float a0 = __half2float(in0[i]);
    const float a1 = __half2float(in1[c1]);
    out[i] = __float2half_rn((a0 + a1));
  }
}
