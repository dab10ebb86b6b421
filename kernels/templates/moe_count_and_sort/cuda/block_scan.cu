// atrex-template: block_scan
// atrex-description: one thread block in one launch: a shared-memory histogram of the flat topk_ids (shared atomics), one block-wide exclusive scan of the counts (warp shuffles, then the warp totals) written as counts and cumsum, then a second pass over the ids (L2 hits) scatters each flat index through a per-expert shared cursor (order within an expert is free); at most 4 experts per thread (4 * BLOCK_THREADS)
// atrex-param: BLOCK_THREADS = 1024 | 256, 1024
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 1024
#endif

#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 64 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");

namespace {

using atrex::cand::fail;
using atrex::cand::kI32;

constexpr int kWarps = BLOCK_THREADS / 32;
constexpr int kPerThread = 4;  // experts per thread in the scan
constexpr int kMaxExperts = kPerThread * BLOCK_THREADS;

// Exclusive prefix of v over the block (thread order); *total receives the block's sum. Called
// once per kernel by every thread; sums has kWarps + 1 entries.
__device__ __forceinline__ int block_exclusive_scan(int v, int* sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    const int w = lane < kWarps ? sums[lane] : 0;
    int s = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    if (lane < kWarps) sums[lane] = s - w;
    if (lane == 31) sums[kWarps] = s;
  }
  __syncthreads();
  *total = sums[kWarps];
  return sums[warp] + x - v;
}

__global__ void __launch_bounds__(BLOCK_THREADS)
    count_sort_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                      int32_t* __restrict__ counts, int32_t* __restrict__ cumsum, int pairs,
                      int experts) {
  __shared__ int count[kMaxExperts];
  __shared__ int cursor[kMaxExperts];
  __shared__ int sums[kWarps + 1];
  const int t = threadIdx.x;
  for (int e = t; e < experts; e += BLOCK_THREADS) count[e] = 0;
  __syncthreads();
  for (int j = t; j < pairs; j += BLOCK_THREADS) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) atomicAdd(&count[x], 1);
  }
  __syncthreads();
  // Thread t scans experts [t * kPerThread, (t + 1) * kPerThread).
  int c[kPerThread], local = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = t * kPerThread + i;
    c[i] = e < experts ? count[e] : 0;
    local += c[i];
  }
  int total;
  int start = block_exclusive_scan(local, sums, &total);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = t * kPerThread + i;
    if (e >= experts) break;
    cursor[e] = start;
    counts[e] = c[i];
    cumsum[e] = start;
    start += c[i];
  }
  if (t == 0) cumsum[experts] = total;
  __syncthreads();
  for (int j = t; j < pairs; j += BLOCK_THREADS) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) sorted[atomicAdd(&cursor[x], 1)] = j;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// topk_ids [T, k] int32 -> sorted_token_ids [T*k], expert_token_counts [E], cumsum [E+1] (int32).
// Ids outside [0, E) are counted nowhere (the reference rejects them).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "moe_count_and_sort");
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* sorted = ts.output("sorted_token_ids", kI32, 1);
  const DLTensor* counts = ts.output("expert_token_counts", kI32, 1);
  const DLTensor* cumsum = ts.output("cumsum", kI32, 1);
  if (!ts.ok()) return ts.failed();
  const int64_t e_count = counts->shape[0];
  const int64_t pairs = ids->shape[0] * ids->shape[1];
  if (e_count < 1 || e_count > kMaxExperts || cumsum->shape[0] != e_count + 1 ||
      sorted->shape[0] != pairs || pairs > 0x7fffffff)
    return fail("moe_count_and_sort: expected counts [E] (E <= %d), cumsum [E+1], "
                "sorted_token_ids [T*k]", kMaxExperts);
  count_sort_kernel<<<1, BLOCK_THREADS, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const int32_t*>(ids->data), static_cast<int32_t*>(sorted->data),
      static_cast<int32_t*>(counts->data), static_cast<int32_t*>(cumsum->data),
      static_cast<int>(pairs), static_cast<int>(e_count));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("moe_count_and_sort: %s", cudaGetErrorString(err));
}
