// atrex-template: subwarp_row
// atrex-description: ROW_THREADS lanes (a warp or an aligned part of one) per row, several rows per block; shuffle-only reduction, packs cached in registers
// atrex-param: ROW_THREADS = 32 | 4, 8, 16, 32
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: REG_PACKS = 4 | 1, 2, 4, 8, 16
#ifndef ROW_THREADS
#define ROW_THREADS 32
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef REG_PACKS
#define REG_PACKS 4
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::aligned;

// V consecutive bf16 values (as bits), aligned like the word that moves them.
template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};

// The machine word that moves V bf16 values in one access (V = 8: a 16-byte load/store).
template <int V>
struct Word;
template <>
struct Word<8> {
  using T = uint4;
};
template <>
struct Word<4> {
  using T = uint2;
};
template <>
struct Word<2> {
  using T = unsigned;
};
template <>
struct Word<1> {
  using T = unsigned short;
};

// Read-only-cache load of an input.
template <int V>
__device__ __forceinline__ Pack<V> load(const uint16_t* p) {
  const typename Word<V>::T u = __ldg(reinterpret_cast<const typename Word<V>::T*>(p));
  Pack<V> r;
  memcpy(&r, &u, sizeof r);
  return r;
}
template <int V>
__device__ __forceinline__ void store(uint16_t* p, const Pack<V>& v) {
  typename Word<V>::T u;
  memcpy(&u, &v, sizeof u);
  *reinterpret_cast<typename Word<V>::T*>(p) = u;
}
__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
// Round-to-nearest-even; pairs go through one packed cvt.rn.bf16x2.f32.
template <int V>
__device__ __forceinline__ Pack<V> to_bf16(const float (&f)[V]) {
  Pack<V> o;
  if constexpr (V == 1)
    o.h[0] = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
  else {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(f[e], f[e + 1]);
      memcpy(&o.h[e], &b, 4);
    }
  }
  return o;
}

template <int V>
__device__ __forceinline__ float sum_sq(const Pack<V>& p) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < V; ++e) s = fmaf(bf2f(p.h[e]), bf2f(p.h[e]), s);
  return s;
}
template <int V>
__device__ __forceinline__ Pack<V> scale(const Pack<V>& x, float inv) {
  float f[V];
#pragma unroll
  for (int e = 0; e < V; ++e) f[e] = bf2f(x.h[e]) * inv;
  return to_bf16<V>(f);
}

constexpr int kRowsPerBlock = BLOCK_THREADS / ROW_THREADS;

// hidden % V == 0 and all row bases are 2V-byte aligned (checked by the host).
// Groups of ROW_THREADS lanes are aligned inside the warp, so xor-shuffles below ROW_THREADS stay
// in the group. Lanes past the last row stay alive until the shuffle (full-mask shuffles need
// them).
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS, 1)
    l2_norm_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ out, int64_t rows,
                   int hidden, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / ROW_THREADS;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * hidden;
  const uint16_t* xr = x + base;
  uint16_t* orow = out + base;
  const int nvec = active ? hidden / V : 0;
  Pack<V> cache[REG_PACKS];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * ROW_THREADS + lane;
    if (i < nvec) {
      cache[c] = load<V>(xr + i * V);
      ss += sum_sq(cache[c]);
    }
  }
  for (int i = REG_PACKS * ROW_THREADS + lane; i < nvec; i += ROW_THREADS)
    ss += sum_sq(load<V>(xr + i * V));
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (!active) return;
  const float inv = 1.0f / sqrtf(ss + eps);
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * ROW_THREADS + lane;
    if (i < nvec) store<V>(orow + i * V, scale(cache[c], inv));
  }
  for (int i = REG_PACKS * ROW_THREADS + lane; i < nvec; i += ROW_THREADS)
    store<V>(orow + i * V, scale(load<V>(xr + i * V), inv));
}

template <int V>
void launch_v(const uint16_t* x, uint16_t* out, int64_t rows, int hidden, float eps,
              cudaStream_t s) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  l2_norm_kernel<V>
      <<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(x, out, rows, hidden, eps);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("l2_norm: missing tensor x or out");
  if (x->ndim != 2 || o->ndim != 2 || !is(x, kBF16) || !is(o, kBF16))
    return fail("l2_norm: expected bf16 x[T,H], out[T,H]");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (o->shape[0] != rows || o->shape[1] != hidden) return fail("l2_norm: shape mismatch");
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("l2_norm: too large");
  if (rows == 0 || hidden == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  // Widest vector that divides the row and keeps every row base aligned; 1 is the scalar fallback.
  int v = VEC;
  while (v > 1 && !(hidden % v == 0 && aligned(xp, 2 * v) && aligned(op, 2 * v))) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int h = static_cast<int>(hidden);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(xp, op, rows, h, eps, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(xp, op, rows, h, eps, s);
  else if (v == 2)
    launch_v<2>(xp, op, rows, h, eps, s);
  else
    launch_v<1>(xp, op, rows, h, eps, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
