// ---- kernel permute_f32_4x2x3_fc141eda: grid=1 block=32 scratch=0
// flame kernel for IR op: %1 = permute %0 {perm=[2, 0, 1]} : f32[4,2,3]
//   inputs: %0: f32[2,3,4]
//   index-mapping copy

extern "C" __global__ void __launch_bounds__(32) permute_f32_4x2x3_fc141eda(const float* __restrict__ in0, float* __restrict__ out) {
  typedef unsigned int idx_t;
  typedef int off_t;
  const idx_t n = 24u;
  const idx_t step = (idx_t)gridDim.x * blockDim.x;
  const idx_t first = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (idx_t i = first; i < n; i += step) {
    idx_t cr = i;
    const off_t c1 = (off_t)(cr % 6u); cr /= 6u;
    const off_t c0 = (off_t)cr;
    const float a0 = in0[c0 + c1 * 4];
    out[i] = a0;
  }
}
