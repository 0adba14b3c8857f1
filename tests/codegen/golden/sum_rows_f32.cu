// ---- kernel reduce_sum_f32_2x300000_rows_23dabd0f: grid=148 block=256 scratch=592
// flame kernel for IR op: %1 = reduce_sum %0 {axes=[1], keepdim=false} : f32[2]
//   inputs: %0: f32[2,300000]
//   rows reduction: 2 outputs x 300000 elements in 74 chunks of 4055

// the accumulator: a value
struct reduce_sum_f32_2x300000_rows_23dabd0f_acc { float v; };
__device__ __forceinline__ reduce_sum_f32_2x300000_rows_23dabd0f_acc reduce_sum_f32_2x300000_rows_23dabd0f_identity() { reduce_sum_f32_2x300000_rows_23dabd0f_acc a; a.v = 0.0f; return a; }
__device__ __forceinline__ reduce_sum_f32_2x300000_rows_23dabd0f_acc reduce_sum_f32_2x300000_rows_23dabd0f_combine(reduce_sum_f32_2x300000_rows_23dabd0f_acc a, reduce_sum_f32_2x300000_rows_23dabd0f_acc b) {
  a.v = (a.v + b.v);
  return a;
}
// after this, lane 0 of the warp holds the warp's total
__device__ __forceinline__ reduce_sum_f32_2x300000_rows_23dabd0f_acc reduce_sum_f32_2x300000_rows_23dabd0f_warp(reduce_sum_f32_2x300000_rows_23dabd0f_acc a) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    reduce_sum_f32_2x300000_rows_23dabd0f_acc b;
    b.v = __shfl_down_sync(0xffffffffu, a.v, d);
    a = reduce_sum_f32_2x300000_rows_23dabd0f_combine(a, b);
  }
  return a;
}
extern "C" __global__ void __launch_bounds__(256) reduce_sum_f32_2x300000_rows_23dabd0f(const float* __restrict__ in0, float* __restrict__ out, void* __restrict__ scratch) {
  typedef unsigned int idx_t;
  typedef int off_t;
  const idx_t M = 2u;  // outputs
  const idx_t R = 300000u;  // reduced elements per output
  const idx_t P = 74u;  // chunks per output (> 1: partials go to scratch, a final kernel folds them)
  const idx_t CH = 4055u;  // reduced elements per chunk
  // 256 threads per (output, chunk); the reduced elements of one output are (mostly) contiguous
  const int lane = threadIdx.x % 256, group = threadIdx.x / 256;
  __shared__ reduce_sum_f32_2x300000_rows_23dabd0f_acc warp_acc[8];
  for (idx_t u = (idx_t)blockIdx.x * 1u + group; u < M * P; u += (idx_t)gridDim.x * 1u) {
    const idx_t o = u % M, p = u / M;
    idx_t kr = o;
    const off_t k0 = (off_t)kr;
    const off_t base = k0 * 300000;
    const idx_t r_end = min(R, (p + 1) * CH);
    reduce_sum_f32_2x300000_rows_23dabd0f_acc a = reduce_sum_f32_2x300000_rows_23dabd0f_identity();
    for (idx_t r = p * CH + lane; r < r_end; r += 256u) {
      reduce_sum_f32_2x300000_rows_23dabd0f_acc b;
      b.v = in0[base + r];
      a = reduce_sum_f32_2x300000_rows_23dabd0f_combine(a, b);
    }
    a = reduce_sum_f32_2x300000_rows_23dabd0f_warp(a);
    if (lane % 32 == 0) warp_acc[lane / 32] = a;
    __syncthreads();
    if (lane < 32) a = reduce_sum_f32_2x300000_rows_23dabd0f_warp(lane < 8 ? warp_acc[lane] : reduce_sum_f32_2x300000_rows_23dabd0f_identity());
    __syncthreads();
    if (lane == 0) {
      reinterpret_cast<float*>(scratch)[o * P + p] = a.v;
    }
  }
}

// ---- kernel reduce_sum_f32_2x300000_final_eb7907b0: grid=1 block=256 scratch=592
// flame kernel for IR op: %1 = reduce_sum %0 {axes=[1], keepdim=false} : f32[2]
//   inputs: %0: f32[2,300000]
//   final fold of 74 partials per output

// the accumulator: a value
struct reduce_sum_f32_2x300000_final_eb7907b0_acc { float v; };
__device__ __forceinline__ reduce_sum_f32_2x300000_final_eb7907b0_acc reduce_sum_f32_2x300000_final_eb7907b0_identity() { reduce_sum_f32_2x300000_final_eb7907b0_acc a; a.v = 0.0f; return a; }
__device__ __forceinline__ reduce_sum_f32_2x300000_final_eb7907b0_acc reduce_sum_f32_2x300000_final_eb7907b0_combine(reduce_sum_f32_2x300000_final_eb7907b0_acc a, reduce_sum_f32_2x300000_final_eb7907b0_acc b) {
  a.v = (a.v + b.v);
  return a;
}
// after this, lane 0 of the warp holds the warp's total
__device__ __forceinline__ reduce_sum_f32_2x300000_final_eb7907b0_acc reduce_sum_f32_2x300000_final_eb7907b0_warp(reduce_sum_f32_2x300000_final_eb7907b0_acc a) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    reduce_sum_f32_2x300000_final_eb7907b0_acc b;
    b.v = __shfl_down_sync(0xffffffffu, a.v, d);
    a = reduce_sum_f32_2x300000_final_eb7907b0_combine(a, b);
  }
  return a;
}
extern "C" __global__ void __launch_bounds__(256) reduce_sum_f32_2x300000_final_eb7907b0(const float* __restrict__ in0, float* __restrict__ out, void* __restrict__ scratch) {
  typedef unsigned int idx_t;
  typedef int off_t;
  const idx_t M = 2u;  // outputs
  const idx_t R = 300000u;  // reduced elements per output
  const idx_t P = 74u;  // chunks per output (> 1: partials go to scratch, a final kernel folds them)
  const idx_t CH = 4055u;  // reduced elements per chunk
  // fold the P partials of each output (one warp per output)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (idx_t o = (idx_t)blockIdx.x * 8u + warp; o < M; o += (idx_t)gridDim.x * 8u) {
    reduce_sum_f32_2x300000_final_eb7907b0_acc a = reduce_sum_f32_2x300000_final_eb7907b0_identity();
    for (idx_t p = lane; p < P; p += 32u) {
      reduce_sum_f32_2x300000_final_eb7907b0_acc b;
      b.v = reinterpret_cast<const float*>(scratch)[o * P + p];
      a = reduce_sum_f32_2x300000_final_eb7907b0_combine(a, b);
    }
    a = reduce_sum_f32_2x300000_final_eb7907b0_warp(a);
    if (lane == 0) out[o] = a.v;
  }
}
