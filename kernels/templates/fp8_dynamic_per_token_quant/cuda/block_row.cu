// atrex-template: block_row
// atrex-description: one thread block per row, sized so each thread caches at most REG_PACKS 2*VEC-byte bf16 packs in registers (capped at BLOCK_THREADS); a shuffle + shared-memory amax, then paired fp32->e4m3 conversions (cvt.satfinite.e4m3x2) and VEC-byte stores
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: REG_PACKS = 4 | 1, 2, 4
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
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 32 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");
static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::aligned;

// The float8_e4m3fnuz range of the reference (stored as e4m3fn).
constexpr float kFp8Max = 240.0f;

template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};
template <int V>
struct alignas(V) Bytes {
  uint8_t b[V];
};
template <int V>
struct Word;
template <>
struct Word<8> {
  using T = uint4;
  using Half = uint2;
};
template <>
struct Word<4> {
  using T = uint2;
  using Half = unsigned;
};
template <>
struct Word<2> {
  using T = unsigned;
  using Half = unsigned short;
};
template <>
struct Word<1> {
  using T = unsigned short;
  using Half = unsigned char;
};
template <int V>
__device__ __forceinline__ Pack<V> load(const uint16_t* p) {
  const typename Word<V>::T u = __ldg(reinterpret_cast<const typename Word<V>::T*>(p));
  Pack<V> r;
  memcpy(&r, &u, sizeof r);
  return r;
}
__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
template <int V>
__device__ __forceinline__ float pack_amax(const Pack<V>& p, float m) {
#pragma unroll
  for (int e = 0; e < V; ++e) m = fmaxf(m, fabsf(bf2f(p.h[e])));
  return m;
}
// q = e4m3(clamp(x * inv, -240, 240)), V bytes in one store.
template <int V>
__device__ __forceinline__ void quant_store(uint8_t* q, const Pack<V>& p, float inv) {
  if constexpr (V == 1) {
    *q = __nv_cvt_float_to_fp8(fminf(fmaxf(bf2f(p.h[0]) * inv, -kFp8Max), kFp8Max),
                               __NV_SATFINITE, __NV_E4M3);
  } else {
    Bytes<V> o;
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const float2 f = make_float2(fminf(fmaxf(bf2f(p.h[e]) * inv, -kFp8Max), kFp8Max),
                                   fminf(fmaxf(bf2f(p.h[e + 1]) * inv, -kFp8Max), kFp8Max));
      const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
      memcpy(&o.b[e], &two, 2);
    }
    typename Word<V>::Half u;
    memcpy(&u, &o, sizeof u);
    *reinterpret_cast<typename Word<V>::Half*>(q) = u;
  }
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[BLOCK_THREADS / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? partial[threadIdx.x & 31] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// hidden % V == 0, x 2V-byte and q V-byte aligned (checked by the host).
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    quant_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale,
                 int hidden) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const uint16_t* xr = x + base;
  uint8_t* qr = q + base;
  const int nvec = hidden / V, nt = static_cast<int>(blockDim.x);
  Pack<V> cache[REG_PACKS];
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + static_cast<int>(threadIdx.x);
    if (i < nvec) {
      cache[c] = load<V>(xr + i * V);
      amax = pack_amax(cache[c], amax);
    }
  }
  for (int i = REG_PACKS * nt + threadIdx.x; i < nvec; i += nt) amax = pack_amax(load<V>(xr + i * V), amax);
  amax = block_max(amax);
  const float s = fmaxf(amax, 1e-12f) * (1.0f / kFp8Max);
  const float inv = 1.0f / s;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + static_cast<int>(threadIdx.x);
    if (i < nvec) quant_store<V>(qr + i * V, cache[c], inv);
  }
  for (int i = REG_PACKS * nt + threadIdx.x; i < nvec; i += nt) quant_store<V>(qr + i * V, load<V>(xr + i * V), inv);
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

template <int V>
void launch_v(const uint16_t* x, uint8_t* q, float* scale, int64_t rows, int hidden, cudaStream_t s) {
  const int64_t want = (hidden / V + REG_PACKS - 1) / REG_PACKS;
  const int threads =
      static_cast<int>(want >= BLOCK_THREADS ? BLOCK_THREADS : (want + 31) / 32 * 32);
  quant_kernel<V><<<static_cast<unsigned>(rows), threads, 0, s>>>(x, q, scale, hidden);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [T, H] bf16 -> q [T, H] e4m3, scale [T] fp32.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fp8_dynamic_per_token_quant");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* q = ts.output("q", kFP8E4M3, 2);
  const DLTensor* sc = ts.output("scale", kF32, 1);
  ts.same_dims(x, q);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (sc->shape[0] != rows) return fail("fp8_dynamic_per_token_quant: scale must be [T]");
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("fp8_dynamic_per_token_quant: too large");
  if (rows == 0) return 0;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* qp = static_cast<uint8_t*>(q->data);
  auto* sp = static_cast<float*>(sc->data);
  int v = VEC;
  while (v > 2 && !(hidden % v == 0 && aligned(xp, 2 * v) && aligned(qp, v))) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int h = static_cast<int>(hidden);
  if (hidden % v != 0 || !aligned(xp, 2 * v) || !aligned(qp, v))
    launch_v<1>(xp, qp, sp, rows, h, s);
  else if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 2)>(xp, qp, sp, rows, h, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 2)>(xp, qp, sp, rows, h, s);
  else
    launch_v<2>(xp, qp, sp, rows, h, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
