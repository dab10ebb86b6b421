// atrex-template: lane_lists
// atrex-description: ROW_THREADS lanes per token row stream its logits (any expert count) keeping an online max/sum of exps and a sorted per-lane top-k list in registers (unrolled insertion); the lists are merged by top_k rounds of a shuffle argmax over the list heads; optional group-limited routing in a first pass over group maxima
// atrex-param: ROW_THREADS = 16 | 4, 8, 16
// atrex-param: BLOCK_THREADS = 128 | 64, 128
#ifndef ROW_THREADS
#define ROW_THREADS 16
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");

namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::kI32;

constexpr int kRowsPerBlock = BLOCK_THREADS / ROW_THREADS;
constexpr int kMaxK = 32;

__device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
  return a > b || (a == b && ia < ib);
}
__device__ __forceinline__ void group_argmax(float& v, int& id) {
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(ov, oi, v, id)) {
      v = ov;
      id = oi;
    }
  }
}
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// K-entry list sorted by better(); insertion shifts with constant indices (stays in registers).
template <int K>
struct TopList {
  float v[K];
  int id[K];
  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < K; ++i) {
      v[i] = -INFINITY;
      id[i] = 0x7fffffff;
    }
  }
  __device__ __forceinline__ void insert(float x, int ix) {
    if (!better(x, ix, v[K - 1], id[K - 1])) return;
#pragma unroll
    for (int i = K - 1; i > 0; --i) {
      // Entry i takes entry i - 1 while x belongs above it, else x (once) or stays.
      if (better(x, ix, v[i - 1], id[i - 1])) {
        v[i] = v[i - 1];
        id[i] = id[i - 1];
      } else if (better(x, ix, v[i], id[i])) {
        v[i] = x;
        id[i] = ix;
      }
    }
    if (better(x, ix, v[0], id[0])) {
      v[0] = x;
      id[0] = ix;
    }
  }
  __device__ __forceinline__ void pop() {
#pragma unroll
    for (int i = 0; i + 1 < K; ++i) {
      v[i] = v[i + 1];
      id[i] = id[i + 1];
    }
    v[K - 1] = -INFINITY;
    id[K - 1] = 0x7fffffff;
  }
};

template <int K>
__global__ void __launch_bounds__(BLOCK_THREADS)
    gating_kernel(const float* __restrict__ g, float* __restrict__ weights, int32_t* __restrict__ ids,
                  int64_t rows, int experts, int k, int groups, int topk_group) {
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / ROW_THREADS;
  const bool active = row < rows;
  const float* gr = g + (active ? row : 0) * experts;
  const int n = active ? experts : 0;
  // Group-limited routing: the kept groups first (at most 64 groups: one bit each).
  uint64_t keep = ~uint64_t{0};
  const int gsize = groups > 0 ? experts / groups : experts;
  if (groups > 0 && topk_group > 0) {
    keep = 0;
    // This lane's groups: lane + s * ROW_THREADS.
    float gmax[64 / ROW_THREADS];
#pragma unroll
    for (int s = 0; s < 64 / ROW_THREADS; ++s) gmax[s] = -INFINITY;
    for (int q = 0; q < groups; ++q) {
      float m = -INFINITY;
      for (int i = q * gsize + lane; i < (q + 1) * gsize && i < n; i += ROW_THREADS) m = fmaxf(m, __ldg(gr + i));
      m = group_max(m);
#pragma unroll
      for (int s = 0; s < 64 / ROW_THREADS; ++s)
        if (q == s * ROW_THREADS + lane) gmax[s] = m;
    }
    for (int r = 0; r < topk_group; ++r) {
      float bv = -INFINITY;
      int bi = 0x7fffffff;
#pragma unroll
      for (int s = 0; s < 64 / ROW_THREADS; ++s) {
        const int q = s * ROW_THREADS + lane;
        if (q < groups && !(keep >> q & 1u) && better(gmax[s], q, bv, bi)) {
          bv = gmax[s];
          bi = q;
        }
      }
      group_argmax(bv, bi);
      keep |= uint64_t{1} << bi;
    }
  }
  // Stream: online softmax statistics (over every expert) and the lane's top-K of the kept ones.
  float m = -INFINITY, s = 0.f;
  TopList<K> list;
  list.init();
  for (int i = lane; i < n; i += ROW_THREADS) {
    const float x = __ldg(gr + i);
    if (x == -INFINITY) {
      // exp(-inf) adds nothing (and -inf - -inf would be NaN).
    } else if (x > m) {
      s = s * expf(m - x) + 1.f;
      m = x;
    } else {
      s += expf(x - m);
    }
    // Masked experts take part as -inf (score 0 in the reference, ties by smaller id).
    list.insert((keep >> (i / gsize) & 1u) ? x : -INFINITY, i);
  }
  // Combine (m, s) over the lanes.
  const float mx = group_max(m);
  float sum = m == -INFINITY ? 0.f : s * expf(m - mx);
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = 1.0f / sum;
  for (int r = 0; r < k; ++r) {
    float bv = list.v[0];
    int bi = list.id[0];
    const int mine = bi;
    group_argmax(bv, bi);
    if (mine == bi) list.pop();
    if (active && lane == 0) {
      weights[row * k + r] = bv == -INFINITY ? 0.f : expf(bv - mx) * inv;
      ids[row * k + r] = bi;
    }
  }
}

template <int K>
void launch(const float* g, float* w, int32_t* ids, int64_t rows, int experts, int k, int groups,
            int topk_group, cudaStream_t s) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  gating_kernel<K><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(g, w, ids, rows, experts,
                                                                          k, groups, topk_group);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// gating_output [T, E] fp32 -> topk_weights [T, k] fp32, topk_ids [T, k] int32.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch_args) {
  atrex::cand::Tensors ts(launch_args, "moe_topk_gating_softmax");
  const DLTensor* g = ts.input("gating_output", kF32, 2);
  const DLTensor* w = ts.output("topk_weights", kF32, 2);
  const DLTensor* id = ts.output("topk_ids", kI32, 2);
  ts.same_dims(w, id);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = g->shape[0], experts = g->shape[1], k = w->shape[1];
  const int64_t groups = atrex_param_int(launch_args, "num_expert_groups", 0);
  const int64_t topk_group = atrex_param_int(launch_args, "topk_group", 0);
  if (w->shape[0] != rows || k < 1 || k > experts)
    return fail("moe_topk_gating_softmax: topk_weights must be [T, k], 1 <= k <= num_experts");
  if (k > kMaxK || experts > 0x7fffffff)
    return fail("moe_topk_gating_softmax: top_k %lld > %d (this template's list size)",
                static_cast<long long>(k), kMaxK);
  const bool grouped = groups > 0 && topk_group > 0;
  if (grouped && (experts % groups != 0 || groups > 64 || topk_group > groups))
    return fail("moe_topk_gating_softmax: grouped routing needs E %% groups == 0, <= 64 groups");
  if (rows == 0) return 0;
  const auto* gp = static_cast<const float*>(g->data);
  auto* wp = static_cast<float*>(w->data);
  auto* ip = static_cast<int32_t*>(id->data);
  const int e = static_cast<int>(experts), kk = static_cast<int>(k);
  const int gq = grouped ? static_cast<int>(groups) : 0, tg = grouped ? static_cast<int>(topk_group) : 0;
  cudaStream_t s = static_cast<cudaStream_t>(launch_args->stream);
  // A lane's list needs at most k entries (the merge takes at most k from one lane).
  if (k <= 8)
    launch<8>(gp, wp, ip, rows, e, kk, gq, tg, s);
  else if (k <= 16)
    launch<16>(gp, wp, ip, rows, e, kk, gq, tg, s);
  else
    launch<32>(gp, wp, ip, rows, e, kk, gq, tg, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
