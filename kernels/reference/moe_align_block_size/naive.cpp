// Reference re-expressed as a cpu candidate: moe_align_block_size.
// topk_ids [T, k] int32 -> per expert (ascending) the flat indices routed to it (ascending),
// padded with T*k to a multiple of block_size; expert_ids: one expert per block;
// num_tokens_post_pad: the padded length. Experts without tokens get no block.
#include <vector>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* sorted = atrex_output(launch, "sorted_token_ids");
  const DLTensor* experts = atrex_output(launch, "expert_ids");
  const DLTensor* post = atrex_output(launch, "num_tokens_post_pad");
  const int64_t num_experts = atrex_param_int(launch, "num_experts", 0),
                block = atrex_param_int(launch, "block_size", 0);
  if (!ids || !sorted || !experts || !post || num_experts < 1 || block < 1) return 1;
  const auto* id = static_cast<const int32_t*>(ids->data);
  auto* s = static_cast<int32_t*>(sorted->data);
  auto* e = static_cast<int32_t*>(experts->data);
  const int64_t pairs = atrex_numel(ids), s_len = atrex_numel(sorted), e_len = atrex_numel(experts);
  std::vector<std::vector<int32_t>> per_expert(static_cast<size_t>(num_experts));
  for (int64_t i = 0; i < pairs; ++i) {
    if (id[i] >= 0 && id[i] < num_experts)
      per_expert[static_cast<size_t>(id[i])].push_back(static_cast<int32_t>(i));
  }
  int64_t pos = 0, blocks = 0;
  for (int64_t x = 0; x < num_experts; ++x) {
    const auto& list = per_expert[static_cast<size_t>(x)];
    if (list.empty()) continue;
    const int64_t padded = (static_cast<int64_t>(list.size()) + block - 1) / block * block;
    if (pos + padded > s_len) return 2;
    for (int64_t j = 0; j < padded; ++j)
      s[pos + j] = j < static_cast<int64_t>(list.size()) ? list[j] : static_cast<int32_t>(pairs);
    for (int64_t b = 0; b < padded / block; ++b) e[blocks++] = static_cast<int32_t>(x);
    pos += padded;
  }
  static_cast<int32_t*>(post->data)[0] = static_cast<int32_t>(pos);
  for (int64_t i = pos; i < s_len; ++i) s[i] = static_cast<int32_t>(pairs);
  for (int64_t b = blocks; b < e_len; ++b) e[b] = -1;
  return 0;
}
