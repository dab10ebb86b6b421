// atrex-template: lane_group
// atrex-description: GROUP_LANES lanes (an aligned part of a warp) per quantisation group, groups laid out flat over the grid: each lane caches its 2*VEC-byte bf16 packs of the group in registers (up to 4, longer groups re-read), a shuffle amax over the group's lanes, paired e4m3 conversions, VEC-byte stores; x / scale divided as the reference (DIV=1) or multiplied by 1/scale (DIV=0, within one e4m3 step)
// atrex-param: GROUP_LANES = 16 | 4, 8, 16
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: DIV = 1 | 0, 1
#ifndef GROUP_LANES
#define GROUP_LANES 16
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef DIV
#define DIV 1
#endif
#define BLOCK_THREADS 256

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::aligned;

constexpr float kFp8Max = 448.0f;

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
// x / s as the reference divides (IEEE division), or x * (1/s) (within one e4m3 step).
__device__ __forceinline__ float apply(float x, float s, float inv) {
#if DIV
  (void)inv;
  return x / s;
#else
  (void)s;
  return x * inv;
#endif
}
template <int V>
__device__ __forceinline__ float pack_amax(const Pack<V>& p, float m) {
#pragma unroll
  for (int e = 0; e < V; ++e) m = fmaxf(m, fabsf(bf2f(p.h[e])));
  return m;
}
// q = e4m3(clamp(x OP s, -448, 448)), V bytes in one store; OP divides (DIV) or multiplies by 1/s.
template <int V>
__device__ __forceinline__ void quant_store(uint8_t* q, const Pack<V>& p, float s, float inv) {
  if constexpr (V == 1) {
    *q = __nv_cvt_float_to_fp8(fminf(fmaxf(apply(bf2f(p.h[0]), s, inv), -kFp8Max), kFp8Max),
                               __NV_SATFINITE, __NV_E4M3);
  } else {
    Bytes<V> o;
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const float2 f = make_float2(fminf(fmaxf(apply(bf2f(p.h[e]), s, inv), -kFp8Max), kFp8Max),
                                   fminf(fmaxf(apply(bf2f(p.h[e + 1]), s, inv), -kFp8Max), kFp8Max));
      const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
      memcpy(&o.b[e], &two, 2);
    }
    typename Word<V>::Half u;
    memcpy(&u, &o, sizeof u);
    *reinterpret_cast<typename Word<V>::Half*>(q) = u;
  }
}

static_assert(GROUP_LANES >= 1 && GROUP_LANES <= 32 && (GROUP_LANES & (GROUP_LANES - 1)) == 0,
              "GROUP_LANES");
constexpr int kGroupsPerBlock = BLOCK_THREADS / GROUP_LANES;
constexpr int kRegPacks = 4;

// Group g covers x[g * group, +group) (rows are whole groups: the flat index is the row-major
// one). group % V == 0, x 2V-byte and q V-byte aligned (checked by the host). Lanes past the last
// group stay until the shuffle.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    group_quant_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q,
                       float* __restrict__ scales, int64_t groups, int group) {
  const int lane = static_cast<int>(threadIdx.x) % GROUP_LANES;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + threadIdx.x / GROUP_LANES;
  const bool active = g < groups;
  const int64_t base = (active ? g : 0) * group;
  const uint16_t* xg = x + base;
  uint8_t* qg = q + base;
  const int nvec = active ? group / V : 0;
  Pack<V> cache[kRegPacks];
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < kRegPacks; ++c) {
    const int i = c * GROUP_LANES + lane;
    if (i < nvec) {
      cache[c] = load<V>(xg + i * V);
      amax = pack_amax(cache[c], amax);
    }
  }
  for (int i = kRegPacks * GROUP_LANES + lane; i < nvec; i += GROUP_LANES)
    amax = pack_amax(load<V>(xg + i * V), amax);
#pragma unroll
  for (int o = GROUP_LANES / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!active) return;
  const float s = fmaxf(amax * (1.0f / kFp8Max), 1e-10f);
  const float inv = 1.0f / s;
#pragma unroll
  for (int c = 0; c < kRegPacks; ++c) {
    const int i = c * GROUP_LANES + lane;
    if (i < nvec) quant_store<V>(qg + i * V, cache[c], s, inv);
  }
  for (int i = kRegPacks * GROUP_LANES + lane; i < nvec; i += GROUP_LANES)
    quant_store<V>(qg + i * V, load<V>(xg + i * V), s, inv);
  if (lane == 0) scales[g] = s;
}

template <int V>
int launch_v(const uint16_t* x, uint8_t* q, float* scales, int64_t groups, int group, cudaStream_t s) {
  const int64_t blocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  if (blocks > 0x7fffffff) return fail("per_token_group_quant_fp8: too many groups");
  group_quant_kernel<V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(x, q, scales, groups, group);
  return 0;
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [T, H] bf16 -> quantized [T, H] e4m3, scales [T, H / group_size] fp32.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "per_token_group_quant_fp8");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* q = ts.output("quantized", kFP8E4M3, 2);
  const DLTensor* sc = ts.output("scales", kF32, 2);
  ts.same_dims(x, q);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const int64_t group = atrex_param_int(launch, "group_size", 0);
  if (group <= 0 || hidden % group != 0 || sc->shape[0] != rows || sc->shape[1] != hidden / group)
    return fail("per_token_group_quant_fp8: group_size must divide hidden_size; scales [T, H / group_size]");
  if (group > 0x7fffffff) return fail("per_token_group_quant_fp8: group too large");
  const int64_t groups = rows * (hidden / group);
  if (groups == 0) return 0;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* qp = static_cast<uint8_t*>(q->data);
  auto* sp = static_cast<float*>(sc->data);
  int v = VEC;
  while (v > 1 && !(group % v == 0 && aligned(xp, 2 * v) && aligned(qp, v))) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int g = static_cast<int>(group);
  int rc;
  if (VEC >= 8 && v == 8)
    rc = launch_v<(VEC >= 8 ? 8 : 2)>(xp, qp, sp, groups, g, s);
  else if (VEC >= 4 && v == 4)
    rc = launch_v<(VEC >= 4 ? 4 : 2)>(xp, qp, sp, groups, g, s);
  else if (v == 2)
    rc = launch_v<2>(xp, qp, sp, groups, g, s);
  else
    rc = launch_v<1>(xp, qp, sp, groups, g, s);
  if (rc != 0) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
