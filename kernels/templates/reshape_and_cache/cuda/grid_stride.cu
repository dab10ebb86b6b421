// atrex-template: grid_stride
// atrex-description: flattened copy over (token, 2*VEC-byte word) of key and value: a persistent grid (BLOCKS_PER_SM blocks per SM, 0 = one thread per PACKS_PER_THREAD words) strides the whole [T, H*d] range, each thread moving PACKS_PER_THREAD consecutive-by-stride words of both tensors per step (all loads before the stores); slots read per word through the L1 (32-bit index math when the range fits)
// atrex-param: BLOCK_THREADS = 256 | 128, 256, 512, 1024
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: PACKS_PER_THREAD = 2 | 1, 2, 4
// atrex-param: BLOCKS_PER_SM = 4 | 0, 1, 2, 4, 8
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef PACKS_PER_THREAD
#define PACKS_PER_THREAD 2
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 4
#endif

#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");
static_assert(PACKS_PER_THREAD >= 1 && PACKS_PER_THREAD <= 8, "PACKS_PER_THREAD");
static_assert(BLOCKS_PER_SM >= 0 && BLOCKS_PER_SM <= 32, "BLOCKS_PER_SM");

namespace {

using atrex::cand::Tensors;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI64;
using atrex::cand::pick_vector_width;
using atrex::cand::dispatch_vector_width;

// The machine word that moves V bf16 values in one access; words are copied unchanged.
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

// Word w of the flattened [T, row_words] range belongs to token w / row_words; it lands at word
// w % row_words of slot slot_mapping[token] (skipped when the slot is negative or past the cache).
// A step handles words base + u * stride (u < PACKS_PER_THREAD), so a warp's accesses stay
// contiguous for every u. Idx is uint32_t when the range fits, else uint64_t.
template <int V, class Idx>
__global__ void __launch_bounds__(BLOCK_THREADS)
    reshape_and_cache_kernel(const typename Word<V>::T* __restrict__ key,
                             const typename Word<V>::T* __restrict__ value,
                             const int64_t* __restrict__ slot_mapping,
                             typename Word<V>::T* __restrict__ key_cache,
                             typename Word<V>::T* __restrict__ value_cache, Idx total,
                             Idx row_words, int64_t num_slots) {
  using W = typename Word<V>::T;
  const Idx stride = static_cast<Idx>(gridDim.x) * BLOCK_THREADS;
  for (Idx base = static_cast<Idx>(blockIdx.x) * BLOCK_THREADS + threadIdx.x; base < total;
       base += stride * PACKS_PER_THREAD) {
    W kw[PACKS_PER_THREAD], vw[PACKS_PER_THREAD];
    int64_t dst[PACKS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < PACKS_PER_THREAD; ++u) {
      const Idx w = base + static_cast<Idx>(u) * stride;
      dst[u] = -1;
      if (w < total) {
        const Idx t = w / row_words, e = w - t * row_words;
        const int64_t slot = __ldg(slot_mapping + t);
        if (slot >= 0 && slot < num_slots) {
          dst[u] = slot * static_cast<int64_t>(row_words) + static_cast<int64_t>(e);
          kw[u] = __ldcs(key + w);
          vw[u] = __ldcs(value + w);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < PACKS_PER_THREAD; ++u) {
      if (dst[u] >= 0) {
        __stcs(key_cache + dst[u], kw[u]);
        __stcs(value_cache + dst[u], vw[u]);
      }
    }
  }
}

int sm_count() {
  static int count = 0;
  if (count == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        count <= 0)
      count = 132;
  }
  return count;
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
  const int64_t total = tokens * (row / v);
  // Enough threads for every word once (PACKS_PER_THREAD words each), capped by the persistent
  // grid when BLOCKS_PER_SM > 0.
  const int64_t per_block = int64_t{BLOCK_THREADS} * PACKS_PER_THREAD;
  int64_t blocks = (total + per_block - 1) / per_block;
  if (BLOCKS_PER_SM > 0 && blocks > int64_t{BLOCKS_PER_SM} * sm_count())
    blocks = int64_t{BLOCKS_PER_SM} * sm_count();
  if (blocks > 0x7fffffff) blocks = 0x7fffffff;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  // 32-bit index math when every word index (plus one stride step past the end) fits.
  const bool narrow = total + blocks * per_block < (int64_t{1} << 32);
  dispatch_vector_width<VEC>(v, [&](auto vc_) {
    constexpr int V = decltype(vc_)::value;
    using W = typename Word<V>::T;
    const auto* kp = static_cast<const W*>(key->data);
    const auto* vp = static_cast<const W*>(value->data);
    const auto* sp = static_cast<const int64_t*>(slots->data);
    auto* kcp = static_cast<W*>(kc->data);
    auto* vcp = static_cast<W*>(vc->data);
    if (narrow)
      reshape_and_cache_kernel<V, uint32_t><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
          kp, vp, sp, kcp, vcp, static_cast<uint32_t>(total), static_cast<uint32_t>(row / V),
          num_slots);
    else
      reshape_and_cache_kernel<V, uint64_t><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
          kp, vp, sp, kcp, vcp, static_cast<uint64_t>(total), static_cast<uint64_t>(row / V),
          num_slots);
  });
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("reshape_and_cache: %s", cudaGetErrorString(err));
}
