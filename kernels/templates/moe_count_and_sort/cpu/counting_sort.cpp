// atrex-template: counting_sort
// atrex-description: single-threaded stable counting sort: a histogram of the flat topk_ids (HISTS interleaved copies so consecutive increments of one expert do not wait on each other), counts and the exclusive cumsum by one pass, then a scatter of the flat indices through per-expert cursors
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

// topk_ids [T, k] int32 -> sorted_token_ids [T*k], expert_token_counts [E], cumsum [E+1] (int32).
// An id outside [0, E) fails the call (the reference rejects it too).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "moe_count_and_sort");
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* sorted = ts.output("sorted_token_ids", kI32, 1);
  const DLTensor* counts = ts.output("expert_token_counts", kI32, 1);
  const DLTensor* cumsum = ts.output("cumsum", kI32, 1);
  if (!ts.ok()) return ts.failed();
  const int64_t e_count = counts->shape[0];
  const int64_t pairs = ids->shape[0] * ids->shape[1];
  if (e_count < 1 || cumsum->shape[0] != e_count + 1 || sorted->shape[0] != pairs ||
      pairs > 0x7fffffff)
    return fail("moe_count_and_sort: expected counts [E], cumsum [E+1], sorted_token_ids [T*k]");
  const auto* id = static_cast<const int32_t*>(ids->data);
  auto* s = static_cast<int32_t*>(sorted->data);
  auto* c = static_cast<int32_t*>(counts->data);
  auto* cs = static_cast<int32_t*>(cumsum->data);
  const auto ue = static_cast<size_t>(e_count);
  const auto ne = static_cast<uint32_t>(e_count);
  std::vector<int32_t> hist(ue * HISTS, 0);
  uint32_t bad = 0;
  int64_t i = 0;
  for (; i + HISTS <= pairs; i += HISTS)
    for (int h = 0; h < HISTS; ++h) {
      const uint32_t x = static_cast<uint32_t>(id[i + h]);
      bad |= x >= ne;
      ++hist[static_cast<size_t>(h) * ue + (x < ne ? x : 0)];
    }
  for (; i < pairs; ++i) {
    const uint32_t x = static_cast<uint32_t>(id[i]);
    bad |= x >= ne;
    ++hist[x < ne ? x : 0];
  }
  if (bad) return fail("moe_count_and_sort: a topk_id outside [0, %lld)", static_cast<long long>(e_count));
  std::vector<int32_t> next(ue);
  int32_t pos = 0;
  cs[0] = 0;
  for (size_t e = 0; e < ue; ++e) {
    int32_t n = 0;
    for (int h = 0; h < HISTS; ++h) n += hist[static_cast<size_t>(h) * ue + e];
    c[e] = n;
    next[e] = pos;
    pos += n;
    cs[e + 1] = pos;
  }
  for (int64_t j = 0; j < pairs; ++j) s[next[static_cast<uint32_t>(id[j])]++] = static_cast<int32_t>(j);
  return 0;
}
