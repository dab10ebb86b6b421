// atrex-template: bisect_cluster
// atrex-description: the k-th largest key found by bisection on its 32 bits (most significant first, each step counts the values whose order-preserving key is >= the candidate by warp ballots and a block sum; stops early once exactly k values remain); a row is split over a thread-block cluster of up to CLUSTER blocks (sm_90, counts summed through distributed shared memory) when there are too few rows to fill the GPU, one block per row otherwise; each block stages its slice of the row in shared memory (global/L2 reads past 48K values), then writes value or -inf
// atrex-param: CLUSTER = 8 | 4, 8
#ifndef CLUSTER
#define CLUSTER 8
#endif

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4 || CLUSTER == 8, "CLUSTER");

namespace {

namespace cg = cooperative_groups;
using atrex::cand::fail;
using atrex::cand::kF32;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSmemValues = 48 * 1024;

__device__ __forceinline__ uint32_t key_of(float f) {
  uint32_t u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Grid: rows * cluster blocks; cluster rank r of row b takes columns [r*slice, (r+1)*slice).
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const float* __restrict__ x, float* __restrict__ out, int cols, int k, int slice,
                int staged) {
  extern __shared__ float dyn[];
  __shared__ int warp_count[kWarps];
  __shared__ int block_count[2];  // double-buffered per step, read by the whole cluster
  cg::cluster_group cluster = cg::this_cluster();
  const int csize = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / csize;
  const int c0 = rank * slice, n = max(0, min(cols, c0 + slice) - c0);
  const float* xr = x + row * cols + c0;
  float* orow = out + row * cols + c0;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (staged) {
    for (int i = t; i < n; i += kThreads) dyn[i] = __ldg(xr + i);
    __syncthreads();
  }
  const float* src = staged ? dyn : xr;
  uint32_t thr = 0;
  for (int bit = 31, step = 0; bit >= 0; --bit, ++step) {
    const uint32_t cand = thr | (1u << bit);
    int mine = 0;
    // Every lane of a warp runs the same number of ballots.
    for (int i0 = warp * 32; i0 < n; i0 += kThreads) {
      const int i = i0 + lane;
      const bool ge = i < n && key_of(src[i]) >= cand;
      mine += __popc(__ballot_sync(0xffffffffu, ge));
    }
    if (lane == 0) warp_count[warp] = mine;
    __syncthreads();
    if (t == 0) {
      int s = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += warp_count[w];
      block_count[step & 1] = s;
    }
    if (csize > 1) cluster.sync(); else __syncthreads();
    int total = 0;
    for (int r = 0; r < csize; ++r) total += *cluster.map_shared_rank(&block_count[step & 1], r);
    // block_count[step & 1] is rewritten two steps later, after the next step's sync.
    if (total >= k) thr = cand;
    if (total == k) break;  // the same in every block of the cluster
  }
  if (csize > 1) cluster.sync();  // remote reads done before any block exits
  for (int i = t; i < n; i += kThreads) {
    const float v = src[i];
    orow[i] = key_of(v) >= thr ? v : -INFINITY;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// logits [S, V] fp32 -> out [S, V] fp32: logits where >= the row's k-th largest (k =
// min(top_k, V), default 50), else -inf.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch_args) {
  atrex::cand::Tensors ts(launch_args, "topk_filter");
  const DLTensor* x = ts.input("logits", kF32, 2);
  const DLTensor* o = ts.output("out", kF32, 2);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], cols = x->shape[1];
  int64_t k = atrex_param_int(launch_args, "top_k", 50);
  if (k > cols) k = cols;
  if (k < 1 || cols > 0x7fffffff || rows * CLUSTER > 0x7fffffff)
    return fail("topk_filter: top_k must be >= 1 (got %lld)", static_cast<long long>(k));
  if (rows == 0 || cols == 0) return 0;
  static int sms = 0;  // once per process, with the shared-memory opt-in (not under capture)
  if (sms == 0) {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1)
      n = 132;
    const cudaError_t e = cudaFuncSetAttribute(topk_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kMaxSmemValues * sizeof(float)));
    if (e != cudaSuccess) return fail("topk_filter: %s", cudaGetErrorString(e));
    sms = n;
  }
  // Split rows over a cluster only while the rows alone leave most SMs idle.
  int csize = 1;
  while (csize < CLUSTER && rows * csize * 2 <= sms && cols / (csize * 2) >= 2048) csize *= 2;
  const int slice = static_cast<int>((cols + csize - 1) / csize);
  const int staged = slice <= kMaxSmemValues;
  const size_t smem = staged ? static_cast<size_t>(slice) * sizeof(float) : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows * csize));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = static_cast<cudaStream_t>(launch_args->stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(csize);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, topk_kernel, static_cast<const float*>(x->data),
                                           static_cast<float*>(o->data), static_cast<int>(cols),
                                           static_cast<int>(k), slice, staged);
  if (e != cudaSuccess) return fail("topk_filter: %s", cudaGetErrorString(e));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("topk_filter: %s", cudaGetErrorString(err));
}
