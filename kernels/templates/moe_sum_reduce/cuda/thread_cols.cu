// atrex-template: thread_cols
// atrex-description: one thread per (token, VEC-column pack), flattened 1D grid; the top_k loads unrolled K_UNROLL at a time for memory-level parallelism
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512, 1024
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: K_UNROLL = 4 | 1, 2, 4, 8
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef K_UNROLL
#define K_UNROLL 4
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

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
__device__ __forceinline__ void accumulate(float (&acc)[V], const Pack<V>& p) {
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] += bf2f(p.h[e]);
}

// hidden % V == 0 (checked by the host): output pack p is at out + p*V. Sums in k order, like the
// reference.
template <int V, typename Idx>
__global__ void __launch_bounds__(BLOCK_THREADS, 1)
    moe_sum_reduce_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ out, Idx total,
                          Idx row_packs, int top_k, int64_t hidden, float scale) {
  const Idx p = static_cast<Idx>(blockIdx.x) * BLOCK_THREADS + threadIdx.x;
  if (p >= total) return;
  const Idx t = p / row_packs;
  const Idx c = p - t * row_packs;
  const uint16_t* src = x + static_cast<int64_t>(t) * top_k * hidden + static_cast<int64_t>(c) * V;
  float acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0.f;
  int k = 0;
  for (; k + K_UNROLL <= top_k; k += K_UNROLL) {
    Pack<V> in[K_UNROLL];
#pragma unroll
    for (int u = 0; u < K_UNROLL; ++u) in[u] = load<V>(src + (k + u) * hidden);
#pragma unroll
    for (int u = 0; u < K_UNROLL; ++u) accumulate<V>(acc, in[u]);
  }
  for (; k < top_k; ++k) accumulate<V>(acc, load<V>(src + k * hidden));
  float f[V];
#pragma unroll
  for (int e = 0; e < V; ++e) f[e] = acc[e] * scale;
  store<V>(out + static_cast<int64_t>(p) * V, to_bf16<V>(f));
}

template <int V>
int launch_v(const uint16_t* x, uint16_t* out, int64_t tokens, int top_k, int64_t hidden,
             float scale, cudaStream_t s) {
  const int64_t row_packs = hidden / V, total = tokens * row_packs;
  const int64_t blocks = (total + BLOCK_THREADS - 1) / BLOCK_THREADS;
  if (blocks > 0x7fffffff) return fail("moe_sum_reduce: grid too large");
  // 32-bit index math (division by row_packs) whenever the flattened index fits.
  if (blocks * BLOCK_THREADS <= 0xffffffffLL)
    moe_sum_reduce_kernel<V, uint32_t><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
        x, out, static_cast<uint32_t>(total), static_cast<uint32_t>(row_packs), top_k, hidden,
        scale);
  else
    moe_sum_reduce_kernel<V, uint64_t><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
        x, out, static_cast<uint64_t>(total), static_cast<uint64_t>(row_packs), top_k, hidden,
        scale);
  return 0;
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// expert_outputs: [T, K, H] -> out: [T, H] = bf16(sum_k x * routed_scaling_factor).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "expert_outputs");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("moe_sum_reduce: missing tensor expert_outputs or out");
  if (x->ndim != 3 || o->ndim != 2 || !is(x, kBF16) || !is(o, kBF16))
    return fail("moe_sum_reduce: expected bf16 expert_outputs[T,K,H] and out[T,H]");
  const int64_t tokens = x->shape[0], top_k = x->shape[1], hidden = x->shape[2];
  if (o->shape[0] != tokens || o->shape[1] != hidden) return fail("moe_sum_reduce: shape mismatch");
  if (top_k > 0x7fffffff) return fail("moe_sum_reduce: top_k too large");
  if (tokens == 0 || hidden == 0) return 0;
  const float scale = static_cast<float>(atrex_param_float(launch, "routed_scaling_factor", 1.0));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  int v = VEC;
  while (v > 1 && !(hidden % v == 0 && aligned(xp, 2 * v) && aligned(op, 2 * v))) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int k = static_cast<int>(top_k);
  int rc;
  if (VEC >= 8 && v == 8)
    rc = launch_v<(VEC >= 8 ? 8 : 1)>(xp, op, tokens, k, hidden, scale, s);
  else if (VEC >= 4 && v == 4)
    rc = launch_v<(VEC >= 4 ? 4 : 1)>(xp, op, tokens, k, hidden, scale, s);
  else if (v == 2)
    rc = launch_v<2>(xp, op, tokens, k, hidden, scale, s);
  else
    rc = launch_v<1>(xp, op, tokens, k, hidden, scale, s);
  if (rc != 0) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
