// atrex-template: cluster_dsmem
// atrex-description: one thread-block cluster of CLUSTER blocks (sm_90) in one launch: each block histograms a contiguous slice of the flat topk_ids in its shared memory, the cluster syncs, then every block reads all the slices' histograms through distributed shared memory to get the expert totals and its own offsets inside each expert's segment (slices in order), scans the padded counts block-wide, writes the pads and expert ids of its share of the experts, and scatters its slice (ids kept in registers between the passes when they fit, shared cursors); no global scratch
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
    align_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                 int32_t* __restrict__ expert_ids, int32_t* __restrict__ post, int pairs,
                 int experts, int block) {
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
    local += (c[i] + block - 1) / block * block;
  }
  cluster.sync();  // no block leaves or reuses its histogram while others may still read it
  int total;
  int start = block_exclusive_scan(local, sums, &total);
  const int pad = pairs;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = t * kPerThread + i;
    if (e >= experts) break;
    const int end = start + (c[i] + block - 1) / block * block;
    cursor[e] = start + before[i];
    // The pads and block ids of expert e are written by block e % CLUSTER.
    if (e % CLUSTER == rank) {
      for (int j = start + c[i]; j < end; ++j) sorted[j] = pad;
      for (int q = start / block; q < end / block; ++q) expert_ids[q] = e;
    }
    start = end;
  }
  if (rank == 0 && t == 0) post[0] = total;
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
  const int64_t worst = pairs + e_count * (block - 1);
  if (worst > sorted->shape[0] || (worst + block - 1) / block > experts->shape[0] ||
      worst > 0x7fffffff)
    return fail("moe_align_block_size: outputs smaller than T*k + E*(block_size-1)");
  align_kernel<<<CLUSTER, kThreads, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const int32_t*>(ids->data), static_cast<int32_t*>(sorted->data),
      static_cast<int32_t*>(experts->data), static_cast<int32_t*>(post->data),
      static_cast<int>(pairs), static_cast<int>(e_count), static_cast<int>(block));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("moe_align_block_size: %s", cudaGetErrorString(err));
}
