// atrex-template: counting_sort
// atrex-description: single-threaded stable counting sort: a histogram of the flat topk_ids (HISTS interleaved copies so consecutive increments of one expert do not wait on each other), padded segment starts by one prefix pass, a scatter of the flat indices, then the pad entries (T*k) and one expert id per block; entries past the padded length are left alone (they are not compared)
// atrex-param: HISTS = 1 | 1, 4
#ifndef HISTS
#define HISTS 1
#endif

#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(HISTS == 1 || HISTS == 2 || HISTS == 4, "HISTS");

namespace {

using atrex::cand::fail;
using atrex::cand::kI32;

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
  if (e_count < 1 || block < 1 || pairs > 0x7fffffff)
    return fail("moe_align_block_size: needs num_experts >= 1, block_size >= 1 (got %lld, %lld)",
                static_cast<long long>(e_count), static_cast<long long>(block));
  const auto* id = static_cast<const int32_t*>(ids->data);
  auto* s = static_cast<int32_t*>(sorted->data);
  auto* ex = static_cast<int32_t*>(experts->data);
  const auto ue = static_cast<size_t>(e_count);
  std::vector<int32_t> hist(ue * HISTS, 0);
  int64_t i = 0;
  for (; i + HISTS <= pairs; i += HISTS)
    for (int h = 0; h < HISTS; ++h) {
      const uint32_t x = static_cast<uint32_t>(id[i + h]);
      if (x < static_cast<uint32_t>(e_count)) ++hist[static_cast<size_t>(h) * ue + x];
    }
  for (; i < pairs; ++i) {
    const uint32_t x = static_cast<uint32_t>(id[i]);
    if (x < static_cast<uint32_t>(e_count)) ++hist[x];
  }
  // next[e]: where expert e's next index goes; end[e]: its padded segment's end.
  std::vector<int64_t> next(ue), end(ue);
  int64_t pos = 0, blocks = 0;
  for (size_t e = 0; e < ue; ++e) {
    int64_t c = 0;
    for (int h = 0; h < HISTS; ++h) c += hist[static_cast<size_t>(h) * ue + e];
    next[e] = pos;
    pos += (c + block - 1) / block * block;
    end[e] = pos;
  }
  if (pos > sorted->shape[0] || pos / block > experts->shape[0])
    return fail("moe_align_block_size: padded length %lld exceeds the outputs",
                static_cast<long long>(pos));
  for (int64_t j = 0; j < pairs; ++j) {
    const uint32_t x = static_cast<uint32_t>(id[j]);
    if (x < static_cast<uint32_t>(e_count)) s[next[x]++] = static_cast<int32_t>(j);
  }
  const auto pad = static_cast<int32_t>(pairs);
  for (size_t e = 0; e < ue; ++e) {
    for (int64_t j = next[e]; j < end[e]; ++j) s[j] = pad;
    const int64_t first = (end[e] - (e ? end[e - 1] : 0)) / block;
    for (int64_t b = 0; b < first; ++b) ex[blocks++] = static_cast<int32_t>(e);
  }
  static_cast<int32_t*>(post->data)[0] = static_cast<int32_t>(pos);
  return 0;
}
