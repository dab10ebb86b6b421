// atrex-template: block_token
// atrex-description: 2D blocks: threadIdx.x strides over VEC-wide column packs of a token, threadIdx.y and TOKENS_PER_THREAD over tokens; per k, the loads of all a thread's tokens are in flight together
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: TOKENS_PER_THREAD = 1 | 1, 2, 4
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef TOKENS_PER_THREAD
#define TOKENS_PER_THREAD 1
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

// hidden % V == 0 (checked by the host). Sums in k order, like the reference.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS, 1)
    moe_sum_reduce_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ out,
                          int64_t tokens, int top_k, int64_t hidden, float scale) {
  const int64_t row_packs = hidden / V;
  const int64_t t0 =
      static_cast<int64_t>(blockIdx.x) * blockDim.y * TOKENS_PER_THREAD + threadIdx.y;
  for (int64_t c = threadIdx.x; c < row_packs; c += blockDim.x) {
    float acc[TOKENS_PER_THREAD][V];
#pragma unroll
    for (int j = 0; j < TOKENS_PER_THREAD; ++j)
#pragma unroll
      for (int e = 0; e < V; ++e) acc[j][e] = 0.f;
#pragma unroll 4
    for (int k = 0; k < top_k; ++k) {
#pragma unroll
      for (int j = 0; j < TOKENS_PER_THREAD; ++j) {
        const int64_t t = t0 + static_cast<int64_t>(j) * blockDim.y;
        if (t < tokens) accumulate<V>(acc[j], load<V>(x + (t * top_k + k) * hidden + c * V));
      }
    }
#pragma unroll
    for (int j = 0; j < TOKENS_PER_THREAD; ++j) {
      const int64_t t = t0 + static_cast<int64_t>(j) * blockDim.y;
      if (t >= tokens) continue;
      float f[V];
#pragma unroll
      for (int e = 0; e < V; ++e) f[e] = acc[j][e] * scale;
      store<V>(out + t * hidden + c * V, to_bf16<V>(f));
    }
  }
}

template <int V>
int launch_v(const uint16_t* x, uint16_t* out, int64_t tokens, int top_k, int64_t hidden,
             float scale, cudaStream_t s) {
  const int64_t row_packs = hidden / V;
  // Narrow rows get several tokens per block instead of idle lanes.
  const int bx =
      static_cast<int>(row_packs >= BLOCK_THREADS ? BLOCK_THREADS : (row_packs + 31) / 32 * 32);
  const int by = BLOCK_THREADS / bx;
  const int64_t per_block = static_cast<int64_t>(by) * TOKENS_PER_THREAD;
  const int64_t blocks = (tokens + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return fail("moe_sum_reduce: grid too large");
  moe_sum_reduce_kernel<V>
      <<<static_cast<unsigned>(blocks), dim3(bx, by), 0, s>>>(x, out, tokens, top_k, hidden, scale);
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
