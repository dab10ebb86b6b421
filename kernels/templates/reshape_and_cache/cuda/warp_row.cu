// atrex-template: warp_row
// atrex-description: ROW_THREADS lanes (a warp or an aligned part of one) per token row, several rows per block; the slot is read once per row, key and value rows copied in the same loop with 2*VEC-byte vector loads/stores, UNROLL packs of each in flight per lane; STREAMING uses evict-first loads/stores (the rows are touched once)
// atrex-param: ROW_THREADS = 32 | 4, 8, 16, 32
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: UNROLL = 2 | 1, 2, 4
// atrex-param: STREAMING = 1 | 0, 1
#ifndef ROW_THREADS
#define ROW_THREADS 32
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef UNROLL
#define UNROLL 2
#endif
#ifndef STREAMING
#define STREAMING 1
#endif

#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024 && BLOCK_THREADS >= ROW_THREADS,
              "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");
static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL");

namespace {

using atrex::cand::Tensors;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI64;
using atrex::cand::pick_vector_width;
using atrex::cand::dispatch_vector_width;

// The machine word that moves V bf16 values in one access (V = 8: a 16-byte load/store). A copy
// needs no element view: words go from the row to the cache unchanged (bit-exact).
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

template <class W>
__device__ __forceinline__ W load_word(const W* p) {
#if STREAMING
  return __ldcs(p);
#else
  return __ldg(p);
#endif
}
template <class W>
__device__ __forceinline__ void store_word(W* p, const W& w) {
#if STREAMING
  __stcs(p, w);
#else
  *p = w;
#endif
}

constexpr int kRowsPerBlock = BLOCK_THREADS / ROW_THREADS;

// key/value rows [T, row_words] and caches [num_slots, row_words] in words of V elements.
// Token t of the block's group goes to slot slot_mapping[t]; a negative slot (padding token) or
// one past the cache is skipped, as the reference does.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    reshape_and_cache_kernel(const typename Word<V>::T* __restrict__ key,
                             const typename Word<V>::T* __restrict__ value,
                             const int64_t* __restrict__ slot_mapping,
                             typename Word<V>::T* __restrict__ key_cache,
                             typename Word<V>::T* __restrict__ value_cache, int64_t tokens,
                             int64_t row_words, int64_t num_slots) {
  using W = typename Word<V>::T;
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / ROW_THREADS;
  if (t >= tokens) return;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const W* kr = key + t * row_words;
  const W* vr = value + t * row_words;
  W* kd = key_cache + slot * row_words;
  W* vd = value_cache + slot * row_words;
  constexpr int kStep = ROW_THREADS * UNROLL;
  int64_t i = lane;
  // Full steps: all UNROLL loads of both rows issued before the stores.
  for (; i + (UNROLL - 1) * ROW_THREADS < row_words; i += kStep) {
    W kw[UNROLL], vw[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      kw[u] = load_word(kr + i + u * ROW_THREADS);
      vw[u] = load_word(vr + i + u * ROW_THREADS);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      store_word(kd + i + u * ROW_THREADS, kw[u]);
      store_word(vd + i + u * ROW_THREADS, vw[u]);
    }
  }
  for (; i < row_words; i += ROW_THREADS) {
    const W kw = load_word(kr + i), vw = load_word(vr + i);
    store_word(kd + i, kw);
    store_word(vd + i, vw);
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "reshape_and_cache");
  const DLTensor* key = ts.input("key", kBF16, 3);      // [T, H, d]
  const DLTensor* value = ts.input("value", kBF16, 3);  // [T, H, d]
  const DLTensor* slots = ts.input("slot_mapping", kI64, 1);
  const DLTensor* kc = ts.output("key_cache", kBF16, 4);    // [num_blocks, bs, H, d]
  const DLTensor* vc = ts.output("value_cache", kBF16, 4);  // [num_blocks, bs, H, d]
  if (!ts.ok() || !ts.same_dims(key, value) || !ts.same_dims(kc, vc) ||
      !ts.dim_is(slots, 0, key->shape[0]) || !ts.dim_is(kc, 2, key->shape[1]) ||
      !ts.dim_is(kc, 3, key->shape[2]))
    return ts.failed();
  const int64_t tokens = key->shape[0], row = key->shape[1] * key->shape[2];
  const int64_t num_slots = kc->shape[0] * kc->shape[1];
  if (tokens == 0 || row == 0) return 0;
  const int v = pick_vector_width(VEC, row, 2, {key->data, value->data, kc->data, vc->data});
  const int64_t blocks = (tokens + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) return fail("reshape_and_cache: %lld tokens is too many",
                                       static_cast<long long>(tokens));
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  dispatch_vector_width<VEC>(v, [&](auto vc_) {
    constexpr int V = decltype(vc_)::value;
    using W = typename Word<V>::T;
    reshape_and_cache_kernel<V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
        static_cast<const W*>(key->data), static_cast<const W*>(value->data),
        static_cast<const int64_t*>(slots->data), static_cast<W*>(kc->data),
        static_cast<W*>(vc->data), tokens, row / V, num_slots);
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("reshape_and_cache: %s", cudaGetErrorString(err));
}
