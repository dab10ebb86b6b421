// atrex-template: warp_regs
// atrex-description: ROW_THREADS lanes per token row hold the row's logits in registers (VEC-wide loads, at most 512 experts); max and sum of exps by shuffles, then top_k rounds of a shuffle argmax (larger logit, then smaller id) with a per-lane taken mask; optional group-limited routing over group maxima
// atrex-param: ROW_THREADS = 32 | 8, 16, 32
// atrex-param: BLOCK_THREADS = 128 | 64, 128
// atrex-param: VEC = 4 | 1, 2, 4
#ifndef ROW_THREADS
#define ROW_THREADS 32
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif
#ifndef VEC
#define VEC 4
#endif

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::kI32;
using atrex::cand::aligned;

constexpr int kMaxExperts = 512;
constexpr int kRowsPerBlock = BLOCK_THREADS / ROW_THREADS;

template <int V>
struct FWord;
template <>
struct FWord<4> {
  using T = float4;
};
template <>
struct FWord<2> {
  using T = float2;
};
template <>
struct FWord<1> {
  using T = float;
};

// (value, id) ordered as the reference's stable descending sort: larger value first, then
// smaller id.
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
  return a > b || (a == b && ia < ib);
}
// Argmax over the lanes of a ROW_THREADS group (xor shuffles stay inside an aligned group).
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
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = ROW_THREADS / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// PER values per lane: element c * ROW_THREADS * V + lane * V + e sits in x[c * V + e]. experts %
// V == 0 and rows are 4V-byte aligned (checked by the host). Lanes of rows past the end stay for
// the shuffles.
template <int V, int PER>
__global__ void __launch_bounds__(BLOCK_THREADS)
    gating_kernel(const float* __restrict__ g, float* __restrict__ weights, int32_t* __restrict__ ids,
                  int64_t rows, int experts, int k, int groups, int topk_group) {
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / ROW_THREADS;
  const bool active = row < rows;
  const float* gr = g + (active ? row : 0) * experts;
  constexpr int kChunks = PER / V;
  float x[PER];
  uint32_t taken = 0;  // bit c * V + e: already chosen, or padding
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int base = (c * ROW_THREADS + lane) * V;
    if (active && base < experts) {
      const typename FWord<V>::T u = __ldg(reinterpret_cast<const typename FWord<V>::T*>(gr + base));
      memcpy(&x[c * V], &u, sizeof u);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        x[c * V + e] = -INFINITY;
        taken |= 1u << (c * V + e);
      }
    }
  }
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < PER; ++i) mx = fmaxf(mx, x[i]);
  mx = group_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < PER; ++i)
    if (!(taken >> i & 1u)) sum += expf(x[i] - mx);
  sum = group_sum(sum);
  if (groups > 0 && topk_group > 0) {
    // Group maxima of the logits (the scores are monotone in them); lane l keeps groups l and
    // l + ROW_THREADS, ... (at most 64 groups).
    const int gsize = experts / groups;
    float gm[64 / ROW_THREADS > 0 ? 64 / ROW_THREADS : 1];
#pragma unroll
    for (int s = 0; s < 64 / ROW_THREADS; ++s) gm[s] = -INFINITY;
    for (int q = 0; q < groups; ++q) {
      float m = -INFINITY;
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const int id = (c * ROW_THREADS + lane) * V + e;
          if (id < experts && id / gsize == q) m = fmaxf(m, x[c * V + e]);
        }
      m = group_max(m);
      if (q % ROW_THREADS == lane) gm[q / ROW_THREADS] = m;
    }
    uint64_t keep = 0;
    for (int r = 0; r < topk_group; ++r) {
      float bv = -INFINITY;
      int bi = 0x7fffffff;
#pragma unroll
      for (int s = 0; s < 64 / ROW_THREADS; ++s) {
        const int q = s * ROW_THREADS + lane;
        if (q < groups && !(keep >> q & 1u) && better(gm[s], q, bv, bi)) {
          bv = gm[s];
          bi = q;
        }
      }
      group_argmax(bv, bi);
      keep |= uint64_t{1} << bi;
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int id = (c * ROW_THREADS + lane) * V + e;
        if (id < experts && !(keep >> (id / gsize) & 1u)) x[c * V + e] = -INFINITY;
      }
  }
  const float inv = 1.0f / sum;
  for (int r = 0; r < k; ++r) {
    float bv = -INFINITY;
    int bi = 0x7fffffff, slot = -1;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int i = c * V + e, id = (c * ROW_THREADS + lane) * V + e;
        if (!(taken >> i & 1u) && better(x[i], id, bv, bi)) {
          bv = x[i];
          bi = id;
          slot = i;
        }
      }
    const int mine = bi;
    group_argmax(bv, bi);
    if (slot >= 0 && mine == bi) taken |= 1u << slot;
    if (active && lane == 0) {
      // A masked expert (group-limited routing) scores 0, as in the reference.
      weights[row * k + r] = bv == -INFINITY ? 0.f : expf(bv - mx) * inv;
      ids[row * k + r] = bi;
    }
  }
}

template <int V, int PER>
void launch(const float* g, float* w, int32_t* ids, int64_t rows, int experts, int k, int groups,
            int topk_group, cudaStream_t s) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  gating_kernel<V, PER><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
      g, w, ids, rows, experts, k, groups, topk_group);
}

// The smallest per-lane register count (a multiple of V, at most 32 / kMaxExperts) holding the row.
template <int V>
void launch_v(const float* g, float* w, int32_t* ids, int64_t rows, int experts, int k, int groups,
              int topk_group, cudaStream_t s) {
  const int per = (experts + ROW_THREADS * V - 1) / (ROW_THREADS * V) * V;
  if (per <= 4 && V <= 4)
    launch<V, (V <= 4 ? 4 : V)>(g, w, ids, rows, experts, k, groups, topk_group, s);
  else if (per <= 8)
    launch<V, 8>(g, w, ids, rows, experts, k, groups, topk_group, s);
  else if (per <= 16)
    launch<V, 16>(g, w, ids, rows, experts, k, groups, topk_group, s);
  else
    launch<V, 32>(g, w, ids, rows, experts, k, groups, topk_group, s);
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
  const int64_t cap = ROW_THREADS * 32 < kMaxExperts ? ROW_THREADS * 32 : kMaxExperts;
  if (experts > cap)
    return fail("moe_topk_gating_softmax: %lld experts; this template holds at most %lld per row",
                static_cast<long long>(experts), static_cast<long long>(cap));
  const bool grouped = groups > 0 && topk_group > 0;
  if (grouped && (experts % groups != 0 || groups > 64 || topk_group > groups))
    return fail("moe_topk_gating_softmax: grouped routing needs E %% groups == 0, <= 64 groups");
  if (rows == 0) return 0;
  const auto* gp = static_cast<const float*>(g->data);
  int v = VEC;
  while (v > 1 && !(experts % v == 0 && aligned(gp, 4 * v))) v /= 2;
  auto* wp = static_cast<float*>(w->data);
  auto* ip = static_cast<int32_t*>(id->data);
  const int e = static_cast<int>(experts), kk = static_cast<int>(k);
  const int gq = grouped ? static_cast<int>(groups) : 0, tg = grouped ? static_cast<int>(topk_group) : 0;
  cudaStream_t s = static_cast<cudaStream_t>(launch_args->stream);
  if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(gp, wp, ip, rows, e, kk, gq, tg, s);
  else if (VEC >= 2 && v == 2)
    launch_v<(VEC >= 2 ? 2 : 1)>(gp, wp, ip, rows, e, kk, gq, tg, s);
  else
    launch_v<1>(gp, wp, ip, rows, e, kk, gq, tg, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
