// atrex-template: cluster_dsmem
// atrex-description: one thread-block cluster of CLUSTER blocks (sm_90) in one launch: each block histograms a contiguous slice of the flat topk_ids in its shared memory, the cluster syncs, then every block reads all the slices' histograms through distributed shared memory for the expert totals and its own offsets inside each expert's segment (slices in order), scans the counts block-wide (block 0 writes counts and cumsum), and scatters its slice (ids kept in registers between the passes when they fit, shared cursors); no global scratch
// atrex-param: CLUSTER = 8 | 2, 8
#ifndef CLUSTER
#define CLUSTER 8
#endif

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4 || CLUSTER == 8, "CLUSTER");

namespace {

namespace cg = cooperative_groups;
using atrex::cand::fail;
using atrex::cand::kI32;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 2;  // experts per thread in the scan
constexpr int kMaxExperts = kPerThread * kThreads;
constexpr int kRegIds = 8;  // ids per thread kept in registers between the two passes

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

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(kThreads)
    count_sort_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                      int32_t* __restrict__ counts, int32_t* __restrict__ cumsum, int pairs,
                      int experts) {
  __shared__ int hist[kMaxExperts];    // this slice's counts, read by the whole cluster
  __shared__ int cursor[kMaxExperts];  // this slice's next write position per expert
  __shared__ int sums[kWarps + 1];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int t = threadIdx.x;
  const int len = (pairs + CLUSTER - 1) / CLUSTER;
  const int b = rank * len, e_end = min(pairs, b + len);
  for (int e = t; e < experts; e += kThreads) hist[e] = 0;
  __syncthreads();
  int keep[kRegIds];
#pragma unroll
  for (int r = 0; r < kRegIds; ++r) {
    const int j = b + r * kThreads + t;
    keep[r] = j < e_end ? __ldg(ids + j) : -1;
    if (static_cast<unsigned>(keep[r]) < static_cast<unsigned>(experts)) atomicAdd(&hist[keep[r]], 1);
  }
  for (int j = b + kRegIds * kThreads + t; j < e_end; j += kThreads) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) atomicAdd(&hist[x], 1);
  }
  cluster.sync();
  // Totals over the slices, and this slice's offset inside each expert.
  int c[kPerThread], before[kPerThread], local = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = t * kPerThread + i;
    c[i] = 0;
    before[i] = 0;
    if (e < experts) {
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) {
        const int n = *cluster.map_shared_rank(&hist[e], r);
        c[i] += n;
        if (r < rank) before[i] += n;
      }
    }
    local += c[i];
  }
  cluster.sync();  // no block leaves or reuses its histogram while others may still read it
  int total;
  int start = block_exclusive_scan(local, sums, &total);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = t * kPerThread + i;
    if (e >= experts) break;
    cursor[e] = start + before[i];
    if (rank == 0) {
      counts[e] = c[i];
      cumsum[e] = start;
    }
    start += c[i];
  }
  if (rank == 0 && t == 0) cumsum[experts] = total;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRegIds; ++r) {
    const int j = b + r * kThreads + t;
    if (static_cast<unsigned>(keep[r]) < static_cast<unsigned>(experts))
      sorted[atomicAdd(&cursor[keep[r]], 1)] = j;
  }
  for (int j = b + kRegIds * kThreads + t; j < e_end; j += kThreads) {
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
  count_sort_kernel<<<CLUSTER, kThreads, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const int32_t*>(ids->data), static_cast<int32_t*>(sorted->data),
      static_cast<int32_t*>(counts->data), static_cast<int32_t*>(cumsum->data),
      static_cast<int>(pairs), static_cast<int>(e_count));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("moe_count_and_sort: %s", cudaGetErrorString(err));
}
