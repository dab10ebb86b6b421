// atrex-template: subwarp_row
// atrex-description: ROW_THREADS lanes (a warp or an aligned part of one) per row, several rows per block; REG_PACKS 2*VEC-byte packs per lane cached in registers (longer rows re-read from cache), a shuffle-only amax, paired e4m3 conversions and VEC-byte stores
// atrex-param: ROW_THREADS = 32 | 8, 16, 32
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: REG_PACKS = 8 | 2, 4, 8
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
#define REG_PACKS 8
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
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

constexpr int kRowsPerBlock = BLOCK_THREADS / ROW_THREADS;

// hidden % V == 0, x 2V-byte and q V-byte aligned (checked by the host). Lanes past the last row
// stay until the shuffle (full-mask shuffles need them).
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    quant_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale,
                 int64_t rows, int hidden) {
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / ROW_THREADS;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * hidden;
  const uint16_t* xr = x + base;
  uint8_t* qr = q + base;
  const int nvec = active ? hidden / V : 0;
  Pack<V> cache[REG_PACKS];
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * ROW_THREADS + lane;
    if (i < nvec) {
      cache[c] = load<V>(xr + i * V);
      amax = pack_amax(cache[c], amax);
    }
  }
  for (int i = REG_PACKS * ROW_THREADS + lane; i < nvec; i += ROW_THREADS)
    amax = pack_amax(load<V>(xr + i * V), amax);
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!active) return;
  const float s = fmaxf(amax, 1e-12f) * (1.0f / kFp8Max);
  const float inv = 1.0f / s;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * ROW_THREADS + lane;
    if (i < nvec) quant_store<V>(qr + i * V, cache[c], inv);
  }
  for (int i = REG_PACKS * ROW_THREADS + lane; i < nvec; i += ROW_THREADS)
    quant_store<V>(qr + i * V, load<V>(xr + i * V), inv);
  if (lane == 0) scale[row] = s;
}

template <int V>
void launch_v(const uint16_t* x, uint8_t* q, float* scale, int64_t rows, int hidden, cudaStream_t s) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  quant_kernel<V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(x, q, scale, rows, hidden);
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
