// atrex-template: block_scan
// atrex-description: one thread block does the whole alignment in one launch: a shared-memory histogram of the flat topk_ids (shared atomics), one block-wide exclusive scan of the padded counts (warp shuffles, then the warp totals), the pad entries and expert ids written per expert, then a second pass over the ids (L2 hits) scatters each flat index through a per-expert shared cursor (order within an expert is free); at most 4 experts per thread (4 * BLOCK_THREADS)
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
    align_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                 int32_t* __restrict__ expert_ids, int32_t* __restrict__ post, int pairs,
                 int experts, int block) {
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
    local += (c[i] + block - 1) / block * block;
  }
  int total;
  int start = block_exclusive_scan(local, sums, &total);
  const int pad = pairs;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = t * kPerThread + i;
    if (e >= experts) break;
    const int end = start + (c[i] + block - 1) / block * block;
    cursor[e] = start;
    for (int j = start + c[i]; j < end; ++j) sorted[j] = pad;
    for (int q = start / block; q < end / block; ++q) expert_ids[q] = e;
    start = end;
  }
  if (t == 0) post[0] = total;
  __syncthreads();
  for (int j = t; j < pairs; j += BLOCK_THREADS) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) sorted[atomicAdd(&cursor[x], 1)] = j;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// topk_ids [T, k] int32 -> sorted_token_ids [T*k + E*(bs-1)], expert_ids [ceil(len/bs)],
// num_tokens_post_pad [1] (all int32). Ids outside [0, E) are routed nowhere (as the reference).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "moe_align_block_size");
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* sorted = ts.output("sorted_token_ids", kI32, 1);
  const DLTensor* experts = ts.output("expert_ids", kI32, 1);
  const DLTensor* post = ts.output("num_tokens_post_pad", kI32, 1);
  if (!ts.ok()) return ts.failed();
  const int64_t e_count = atrex_param_int(launch, "num_experts", 0);
  const int64_t block = atrex_param_int(launch, "block_size", 0);
  const int64_t pairs = ids->shape[0] * ids->shape[1];
  if (e_count < 1 || e_count > kMaxExperts || block < 1)
    return fail("moe_align_block_size: needs 1 <= num_experts <= %d and block_size >= 1 (got %lld, "
                "%lld)", kMaxExperts, static_cast<long long>(e_count), static_cast<long long>(block));
  // The largest padded length must fit the outputs and an int.
  const int64_t worst = pairs + e_count * (block - 1);
  if (worst > sorted->shape[0] || (worst + block - 1) / block > experts->shape[0] ||
      worst > 0x7fffffff)
    return fail("moe_align_block_size: outputs smaller than T*k + E*(block_size-1)");
  align_kernel<<<1, BLOCK_THREADS, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const int32_t*>(ids->data), static_cast<int32_t*>(sorted->data),
      static_cast<int32_t*>(experts->data), static_cast<int32_t*>(post->data),
      static_cast<int>(pairs), static_cast<int>(e_count), static_cast<int>(block));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("moe_align_block_size: %s", cudaGetErrorString(err));
}
