// Reference re-expressed as a cuda candidate: moe_topk_gating_softmax (one thread per row; the
// row is re-scanned instead of stored, so any number of experts fits).
// scores = softmax(gating_output) in fp32; optional group-limited masking (at most 64 groups);
// top_k scores descending (ties: lower expert index first) and their ids.
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

struct Row {
  const float* x;
  int64_t experts, groups, topk_group;
  float max, sum;
  unsigned long long kept;
  __device__ float softmax(int64_t e) const { return expf(x[e] - max) / sum; }
  __device__ float group_best(int64_t g) const {
    const int64_t size = experts / groups;
    float best = 0.0f;
    for (int64_t e = g * size; e < (g + 1) * size; ++e) best = fmaxf(best, softmax(e));
    return best;
  }
  __device__ float score(int64_t e) const {
    if (groups > 0 && topk_group > 0 && !((kept >> (e / (experts / groups))) & 1ull)) return 0.0f;
    return softmax(e);
  }
};

__global__ void gating_kernel(const float* gating, float* weights, int32_t* ids, int64_t rows,
                              int64_t experts, int64_t k, int64_t groups, int64_t topk_group) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  Row row{gating + r * experts, experts, groups, topk_group, -INFINITY, 0.0f, ~0ull};
  for (int64_t e = 0; e < experts; ++e) row.max = fmaxf(row.max, row.x[e]);
  for (int64_t e = 0; e < experts; ++e) row.sum += expf(row.x[e] - row.max);
  if (groups > 0 && topk_group > 0) {
    row.kept = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const float mine = row.group_best(g);
      int64_t ahead = 0;
      for (int64_t h = 0; h < groups; ++h) {
        const float other = row.group_best(h);
        ahead += other > mine || (other == mine && h < g);
      }
      if (ahead < topk_group) row.kept |= 1ull << g;
    }
  }
  float prev = INFINITY;
  int64_t prev_e = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    float best_v = 0.0f;
    for (int64_t e = 0; e < experts; ++e) {
      const float v = row.score(e);
      if ((v < prev || (v == prev && e > prev_e)) && (best < 0 || v > best_v)) {
        best = e;
        best_v = v;
      }
    }
    weights[r * k + j] = best_v;
    ids[r * k + j] = static_cast<int32_t>(best);
    prev = best_v;
    prev_e = best;
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* gating = atrex_input(launch, "gating_output");
  const DLTensor* weights = atrex_output(launch, "topk_weights");
  const DLTensor* ids = atrex_output(launch, "topk_ids");
  if (!gating || !weights || !ids || gating->ndim != 2) return 1;
  const int64_t rows = gating->shape[0], experts = gating->shape[1];
  const int64_t k = atrex_param_int(launch, "top_k", 0),
                groups = atrex_param_int(launch, "num_expert_groups", 0);
  const int64_t topk_group = atrex_param_int(launch, "topk_group", 0);
  if (k < 1 || k > experts || groups > 64) return 2;
  if (rows == 0) return 0;
  const int threads = 128;
  gating_kernel<<<static_cast<unsigned>((rows + threads - 1) / threads), threads, 0,
                  static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const float*>(gating->data), static_cast<float*>(weights->data),
      static_cast<int32_t*>(ids->data), rows, experts, k, groups, topk_group);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
