// atrex-template: head_group
// atrex-description: ROW_THREADS lanes (an aligned part of a warp) per (token, head) of [q | k | v], several heads per block; 2*VEC-byte fp16 loads cached in registers, a shuffle-only sum of squares, then the fp16-rounded normalised value times the head's weight; v heads copied
// atrex-param: ROW_THREADS = 16 | 4, 8, 16
// atrex-param: BLOCK_THREADS = 128 | 64, 128
// atrex-param: VEC = 8 | 2, 4, 8
#ifndef ROW_THREADS
#define ROW_THREADS 16
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif
#ifndef VEC
#define VEC 8
#endif

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::kF16;
using atrex::cand::aligned;

// Packs a lane keeps in registers between the two passes; longer heads re-read the rest.
constexpr int kRegPacks = 4;
constexpr int kHeadsPerBlock = BLOCK_THREADS / ROW_THREADS;

template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};
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
__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

template <int V>
__device__ __forceinline__ float sum_sq(const Pack<V>& p) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < V; ++e) s = fmaf(h2f(p.h[e]), h2f(p.h[e]), s);
  return s;
}
// fp16(w * fp16(x * r)), as the reference rounds.
template <int V>
__device__ __forceinline__ Pack<V> scale(const Pack<V>& x, const Pack<V>& w, float r) {
  Pack<V> o;
#pragma unroll
  for (int e = 0; e < V; ++e) o.h[e] = f2h(h2f(w.h[e]) * h2f(f2h(h2f(x.h[e]) * r)));
  return o;
}

// One lane group per unit (token, slot) of [T, Hq + 2 Hkv] heads of d values; d % V == 0 and all
// pointers 2V-byte aligned (checked by the host). Lanes past the last unit stay for the shuffle.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    qk_norm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ qw,
                   const uint16_t* __restrict__ kw, uint16_t* __restrict__ out, int64_t units,
                   int hq, int hkv, int d, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kHeadsPerBlock + threadIdx.x / ROW_THREADS;
  const bool active = unit < units;
  const int slots = hq + 2 * hkv;
  const int slot = static_cast<int>((active ? unit : 0) % slots);
  const uint16_t* xr = x + (active ? unit : 0) * d;
  uint16_t* orow = out + (active ? unit : 0) * d;
  const int nvec = active ? d / V : 0;
  if (slot >= hq + hkv) {  // v: copied (a whole group takes this branch together)
    for (int i = lane; i < nvec; i += ROW_THREADS) store<V>(orow + i * V, load<V>(xr + i * V));
    return;
  }
  const uint16_t* w = slot < hq ? qw : kw;
  Pack<V> cache[kRegPacks];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < kRegPacks; ++c) {
    const int i = c * ROW_THREADS + lane;
    if (i < nvec) {
      cache[c] = load<V>(xr + i * V);
      ss += sum_sq(cache[c]);
    }
  }
  for (int i = kRegPacks * ROW_THREADS + lane; i < nvec; i += ROW_THREADS) ss += sum_sq(load<V>(xr + i * V));
  // Groups are aligned inside the warp; every lane of a group took the same branch above, and
  // a warp's groups either all copy or mix: shuffles use the group's own lanes only.
  const unsigned mask = ROW_THREADS == 32 ? 0xffffffffu
                                          : (((1u << ROW_THREADS) - 1u) << (threadIdx.x & 31 & ~(ROW_THREADS - 1)));
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(mask, ss, o);
  if (!active) return;
  const float r = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
#pragma unroll
  for (int c = 0; c < kRegPacks; ++c) {
    const int i = c * ROW_THREADS + lane;
    if (i < nvec) store<V>(orow + i * V, scale(cache[c], load<V>(w + i * V), r));
  }
  for (int i = kRegPacks * ROW_THREADS + lane; i < nvec; i += ROW_THREADS)
    store<V>(orow + i * V, scale(load<V>(xr + i * V), load<V>(w + i * V), r));
}

template <int V>
void launch_v(const uint16_t* x, const uint16_t* qw, const uint16_t* kw, uint16_t* out,
              int64_t units, int hq, int hkv, int d, float eps, cudaStream_t s) {
  const int64_t blocks = (units + kHeadsPerBlock - 1) / kHeadsPerBlock;
  qk_norm_kernel<V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(x, qw, kw, out, units, hq,
                                                                           hkv, d, eps);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, (Hq + 2 Hkv) d], q_weight, k_weight [d] (fp16) -> out like hidden_states.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_qk_rmsnorm");
  const DLTensor* x = ts.input("hidden_states", kF16, 2);
  const DLTensor* qw = ts.input("q_weight", kF16, 1);
  const DLTensor* kw = ts.input("k_weight", kF16, 1);
  const DLTensor* o = ts.output("out", kF16, 2);
  ts.same_dims(x, o);
  ts.same_dims(qw, kw);
  if (!ts.ok()) return ts.failed();
  const int64_t hq = atrex_param_int(launch, "head_num", 0), hkv = atrex_param_int(launch, "kv_head_num", 0);
  const int64_t d = qw->shape[0], slots = hq + 2 * hkv, tokens = x->shape[0];
  if (hq < 0 || hkv < 0 || d <= 0 || slots * d != x->shape[1])
    return fail("fused_qk_rmsnorm: hidden_states width must be (head_num + 2 kv_head_num) * size_per_head");
  if (d > 0x7fffffff || slots > 0x7fffffff) return fail("fused_qk_rmsnorm: too large");
  if (tokens == 0 || slots == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* qp = static_cast<const uint16_t*>(qw->data);
  const auto* kp = static_cast<const uint16_t*>(kw->data);
  auto* op = static_cast<uint16_t*>(o->data);
  int v = VEC;
  while (v > 1 && !(d % v == 0 && aligned(xp, 2 * v) && aligned(qp, 2 * v) && aligned(kp, 2 * v) &&
                    aligned(op, 2 * v)))
    v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int64_t units = tokens * slots;
  const int a = static_cast<int>(hq), b = static_cast<int>(hkv), dd = static_cast<int>(d);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(xp, qp, kp, op, units, a, b, dd, eps, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(xp, qp, kp, op, units, a, b, dd, eps, s);
  else if (v == 2)
    launch_v<2>(xp, qp, kp, op, units, a, b, dd, eps, s);
  else
    launch_v<1>(xp, qp, kp, op, units, a, b, dd, eps, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
