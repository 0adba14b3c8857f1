// ---- kernel random_normal_f32_16x16_bcast_a849f793: grid=1 block=64 scratch=0
// flame kernel for IR op: %2 = random_normal %0, %1 {shape=[16, 16], dtype=f32} : f32[16,16]
//   inputs: %0: i64[], %1: i64[]
#ifndef FLAME_PHILOX
#define FLAME_PHILOX
// Philox4x32-10 of counter c under key `seed`, as flame/ir/ops/random.py (bit for bit).
__device__ __forceinline__ uint4 flame_philox(unsigned long long seed, unsigned long long c) {
  unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32), c2 = 0u, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;
    const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;
    const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}
// top 24 bits of w as a double in [0, 1) (exact)
__device__ __forceinline__ double flame_bits_to_unit(unsigned int w) {
  return (double)(w >> 8) * (1.0 / 16777216.0);
}
// 53 bits, exact: the top 24 of hi (flame_bits_to_unit(hi)'s) followed by the top 29 of lo
__device__ __forceinline__ double flame_bits_to_unit53(unsigned int hi, unsigned int lo) {
  return (double)(((unsigned long long)(hi >> 8) << 29) | (unsigned long long)(lo >> 3)) *
         (1.0 / 9007199254740992.0);
}
__device__ __forceinline__ double flame_uniform_24(unsigned long long seed, unsigned long long c) {
  return flame_bits_to_unit(flame_philox(seed, c).x);
}
__device__ __forceinline__ double flame_uniform_53(unsigned long long seed, unsigned long long c) {
  const uint4 w = flame_philox(seed, c);
  return flame_bits_to_unit53(w.x, w.y);
}
// Box-Muller in double, as the reference: u1 in (0, 1] so the log is finite
__device__ __forceinline__ double flame_normal_24(unsigned long long seed, unsigned long long c) {
  const uint4 w = flame_philox(seed, c);
  const double u1 = flame_bits_to_unit(w.x) + (1.0 / 16777216.0);
  const double u2 = flame_bits_to_unit(w.y);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
__device__ __forceinline__ double flame_normal_53(unsigned long long seed, unsigned long long c) {
  const uint4 w = flame_philox(seed, c);
  const double u1 = flame_bits_to_unit53(w.x, w.z) + (1.0 / 9007199254740992.0);
  const double u2 = flame_bits_to_unit53(w.y, w.w);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
#endif

#ifndef FLAME_VEC
#define FLAME_VEC
// N elements moved as one aligned load/store of N * sizeof(T) bytes
template <typename T, int N> struct __align__(sizeof(T) * N) flame_vec { T v[N]; };
#endif
extern "C" __global__ void __launch_bounds__(64) random_normal_f32_16x16_bcast_a849f793(const long long* __restrict__ in0, const long long* __restrict__ in1, float* __restrict__ out) {
  typedef unsigned int idx_t;
  typedef int off_t;
  const idx_t n = 256u;
  const idx_t step = (idx_t)gridDim.x * blockDim.x;
  const idx_t first = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
  const long long a0 = in0[0];  // broadcast scalar
  const long long a1 = in1[0];  // broadcast scalar
  // vector path: every operand is contiguous, a run of whole vectors, or a broadcast scalar; all aligned
  if ((reinterpret_cast<unsigned long long>(out) % 16 == 0)) {
    const idx_t nv = n / 4u;
    for (idx_t v = first; v < nv; v += step) {
      flame_vec<float, 4> res;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const idx_t i = v * 4u + j;
        res.v[j] = ((float)(flame_normal_24((unsigned long long)a0, (unsigned long long)a1 + i)));
      }
      reinterpret_cast<flame_vec<float, 4>*>(out)[v] = res;
    }
    for (idx_t i = nv * 4u + first; i < n; i += step) {  // the tail
      out[i] = ((float)(flame_normal_24((unsigned long long)a0, (unsigned long long)a1 + i)));
    }
    return;
  }
  for (idx_t i = first; i < n; i += step) {
    out[i] = ((float)(flame_normal_24((unsigned long long)a0, (unsigned long long)a1 + i)));
  }
}
