// Reference re-expressed as a cpu candidate: moe_count_and_sort.
// topk_ids [T, k] -> expert_token_counts [E] = bincount, cumsum [E+1] (cumsum[0] = 0),
// sorted_token_ids [T*k] = flat indices grouped by ascending expert (a stable counting sort).
#include <vector>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* sorted = atrex_output(launch, "sorted_token_ids");
  const DLTensor* counts = atrex_output(launch, "expert_token_counts");
  const DLTensor* cumsum = atrex_output(launch, "cumsum");
  const int64_t num_experts = atrex_param_int(launch, "num_experts", 128);
  if (!ids || !sorted || !counts || !cumsum || num_experts < 1) return 1;
  const auto* id = static_cast<const int32_t*>(ids->data);
  auto* c = static_cast<int32_t*>(counts->data);
  auto* cs = static_cast<int32_t*>(cumsum->data);
  auto* s = static_cast<int32_t*>(sorted->data);
  const int64_t pairs = atrex_numel(ids);
  for (int64_t e = 0; e < num_experts; ++e) c[e] = 0;
  for (int64_t i = 0; i < pairs; ++i) {
    if (id[i] < 0 || id[i] >= num_experts) return 2;
    ++c[id[i]];
  }
  cs[0] = 0;
  for (int64_t e = 0; e < num_experts; ++e) cs[e + 1] = cs[e] + c[e];
  std::vector<int32_t> next(cs, cs + num_experts);
  for (int64_t i = 0; i < pairs; ++i)
    s[next[static_cast<size_t>(id[i])]++] = static_cast<int32_t>(i);
  return 0;
}
