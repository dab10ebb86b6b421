// atrex-template: key_sort
// atrex-description: comparison sort instead of counting: every pair becomes one 64-bit key (expert << 32 | flat index), the keys are std::sort-ed (THREADS halves sorted on their own std::threads, then std::inplace_merge), and one walk over the sorted keys writes sorted_token_ids, the counts and the cumsum
// atrex-param: THREADS = 1 | 1, 2
#ifndef THREADS
#define THREADS 1
#endif

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(THREADS == 1 || THREADS == 2, "THREADS");

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
  std::vector<uint64_t> keys(static_cast<size_t>(pairs));
  for (int64_t j = 0; j < pairs; ++j) {
    const uint32_t x = static_cast<uint32_t>(id[j]);
    if (x >= static_cast<uint32_t>(e_count))
      return fail("moe_count_and_sort: topk_id %lld is outside [0, %lld)",
                  static_cast<long long>(id[j]), static_cast<long long>(e_count));
    keys[static_cast<size_t>(j)] = uint64_t{x} << 32 | static_cast<uint32_t>(j);
  }
  const auto mid = keys.begin() + static_cast<std::ptrdiff_t>(keys.size() / 2);
  if (THREADS > 1 && keys.size() >= (1u << 15)) {
    std::thread other([&] { std::sort(mid, keys.end()); });
    std::sort(keys.begin(), mid);
    other.join();
    std::inplace_merge(keys.begin(), mid, keys.end());
  } else {
    std::sort(keys.begin(), keys.end());
  }
  for (int64_t e = 0; e < e_count; ++e) c[e] = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ++c[keys[i] >> 32];
    s[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
  }
  cs[0] = 0;
  for (int64_t e = 0; e < e_count; ++e) cs[e + 1] = cs[e] + c[e];
  return 0;
}
