// atrex-template: token_block
// atrex-description: one block per token row: threads stride flat over the row's 2*VEC-byte fp16 packs (held in registers, up to REG_PACKS each), add their squares into per-head shared-memory sums (atomics), one barrier, then normalise and scale; any head size and head count
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

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");
static_assert(REG_PACKS >= 1 && REG_PACKS <= 16, "REG_PACKS");

namespace {

using atrex::cand::fail;
using atrex::cand::kF16;
using atrex::cand::aligned;

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

// Block t: row t of [T, slots * d]; dynamic shared memory holds one fp32 sum per q/k head.
// d % V == 0 and all pointers 2V-byte aligned (checked by the host), so no pack straddles heads.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    qk_norm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ qw,
                   const uint16_t* __restrict__ kw, uint16_t* __restrict__ out, int hq, int hkv,
                   int d, float eps) {
  extern __shared__ float sums[];
  const int normed = hq + hkv;
  const int64_t width = static_cast<int64_t>(hq + 2 * hkv) * d;
  const uint16_t* xr = x + static_cast<int64_t>(blockIdx.x) * width;
  uint16_t* orow = out + static_cast<int64_t>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < normed; i += BLOCK_THREADS) sums[i] = 0.f;
  __syncthreads();
  const int npacks = static_cast<int>(width / V), normed_packs = normed * (d / V);
  Pack<V> cache[REG_PACKS];
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * BLOCK_THREADS + static_cast<int>(threadIdx.x);
    if (i < npacks) {
      cache[c] = load<V>(xr + static_cast<int64_t>(i) * V);
      if (i < normed_packs) atomicAdd(&sums[i * V / d], sum_sq(cache[c]));
    }
  }
  for (int i = REG_PACKS * BLOCK_THREADS + threadIdx.x; i < normed_packs; i += BLOCK_THREADS)
    atomicAdd(&sums[i * V / d], sum_sq(load<V>(xr + static_cast<int64_t>(i) * V)));
  __syncthreads();
  auto emit = [&](int i, const Pack<V>& p) {
    const int64_t e = static_cast<int64_t>(i) * V;
    if (i >= normed_packs) {
      store<V>(orow + e, p);
      return;
    }
    const int head = static_cast<int>(e / d), col = static_cast<int>(e - static_cast<int64_t>(head) * d);
    const float r = 1.0f / sqrtf(sums[head] / static_cast<float>(d) + eps);
    store<V>(orow + e, scale(p, load<V>((head < hq ? qw : kw) + col), r));
  };
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * BLOCK_THREADS + static_cast<int>(threadIdx.x);
    if (i < npacks) emit(i, cache[c]);
  }
  for (int i = REG_PACKS * BLOCK_THREADS + threadIdx.x; i < npacks; i += BLOCK_THREADS)
    emit(i, load<V>(xr + static_cast<int64_t>(i) * V));
}

template <int V>
void launch_v(const uint16_t* x, const uint16_t* qw, const uint16_t* kw, uint16_t* out,
              int64_t tokens, int hq, int hkv, int d, float eps, cudaStream_t s) {
  const size_t smem = sizeof(float) * static_cast<size_t>(hq + hkv);
  qk_norm_kernel<V><<<static_cast<unsigned>(tokens), BLOCK_THREADS, smem, s>>>(x, qw, kw, out, hq, hkv,
                                                                              d, eps);
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
  if (slots * d > 0x7fffffff || hq + hkv > 12288 || tokens > 0x7fffffff)
    return fail("fused_qk_rmsnorm: too large for this template (rows < 2^31 values, <= 12288 q/k heads)");
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
  const int a = static_cast<int>(hq), b = static_cast<int>(hkv), dd = static_cast<int>(d);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(xp, qp, kp, op, tokens, a, b, dd, eps, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(xp, qp, kp, op, tokens, a, b, dd, eps, s);
  else if (v == 2)
    launch_v<2>(xp, qp, kp, op, tokens, a, b, dd, eps, s);
  else
    launch_v<1>(xp, qp, kp, op, tokens, a, b, dd, eps, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
