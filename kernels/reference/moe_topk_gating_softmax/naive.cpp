// Reference re-expressed as a cpu candidate: moe_topk_gating_softmax.
// gating_output [T, E] fp32 -> scores = softmax (fp32); with num_expert_groups / topk_group set,
// experts outside the topk_group groups of largest max score are zeroed; then top_k scores
// (descending) and their expert ids.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* gating = atrex_input(launch, "gating_output");
  const DLTensor* weights = atrex_output(launch, "topk_weights");
  const DLTensor* ids = atrex_output(launch, "topk_ids");
  if (!gating || !weights || !ids || gating->ndim != 2) return 1;
  const int64_t rows = gating->shape[0], experts = gating->shape[1];
  const int64_t k = atrex_param_int(launch, "top_k", 0),
                groups = atrex_param_int(launch, "num_expert_groups", 0);
  const int64_t topk_group = atrex_param_int(launch, "topk_group", 0);
  if (k < 1 || k > experts) return 2;
  const auto* g = static_cast<const float*>(gating->data);
  auto* w = static_cast<float*>(weights->data);
  auto* id = static_cast<int32_t*>(ids->data);
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = g + r * experts;
    const float mx = *std::max_element(x, x + experts);
    float sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(x[e] - mx);
    for (int64_t e = 0; e < experts; ++e) p[static_cast<size_t>(e)] = std::exp(x[e] - mx) / sum;
    if (groups > 0 && topk_group > 0) {
      const int64_t size = experts / groups;
      std::vector<float> best(static_cast<size_t>(groups));
      std::vector<int32_t> rank(static_cast<size_t>(groups));
      for (int64_t q = 0; q < groups; ++q)
        best[q] = *std::max_element(p.begin() + q * size, p.begin() + (q + 1) * size);
      std::iota(rank.begin(), rank.end(), 0);
      std::stable_sort(rank.begin(), rank.end(),
                       [&](int32_t a, int32_t b) { return best[a] > best[b]; });
      std::vector<bool> keep(static_cast<size_t>(groups), false);
      for (int64_t q = 0; q < topk_group; ++q) keep[static_cast<size_t>(rank[q])] = true;
      for (int64_t e = 0; e < experts; ++e) {
        if (!keep[static_cast<size_t>(e / size)]) p[static_cast<size_t>(e)] = 0.0f;
      }
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    for (int64_t j = 0; j < k; ++j) {
      w[r * k + j] = p[static_cast<size_t>(order[j])];
      id[r * k + j] = order[j];
    }
  }
  return 0;
}
