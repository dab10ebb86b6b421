// atrex-template: chunk_hist
// atrex-description: two-level counting sort over THREADS contiguous chunks of the flat topk_ids: each std::thread histograms its chunk, one serial pass gives counts, cumsum and per-chunk write offsets, then every chunk scatters its own indices (stable overall); threads only when T*k reaches MIN_KPAIRS thousand
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: MIN_KPAIRS = 64 | 64, 256
#ifndef THREADS
#define THREADS 2
#endif
#ifndef MIN_KPAIRS
#define MIN_KPAIRS 64
#endif

#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::fail;
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

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
  auto* cnt = static_cast<int32_t*>(counts->data);
  auto* cs = static_cast<int32_t*>(cumsum->data);
  const auto ue = static_cast<size_t>(e_count);
  const auto ne = static_cast<uint32_t>(e_count);
  const int64_t chunks = pairs >= int64_t{MIN_KPAIRS} * 1000 ? THREADS : 1;
  const int64_t len = (pairs + chunks - 1) / chunks;
  std::vector<int64_t> hist(static_cast<size_t>(chunks) * ue, 0);
  std::vector<uint32_t> bad(static_cast<size_t>(chunks), 0);
  parallel_rows(chunks, 1, static_cast<int>(chunks), 0, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* h = hist.data() + c * e_count;
      const int64_t b = c * len, e = b + len < pairs ? b + len : pairs;
      uint32_t out = 0;
      for (int64_t j = b; j < e; ++j) {
        const uint32_t x = static_cast<uint32_t>(id[j]);
        out |= x >= ne;
        ++h[x < ne ? x : 0];
      }
      bad[static_cast<size_t>(c)] = out;
    }
  });
  for (uint32_t b : bad)
    if (b) return fail("moe_count_and_sort: a topk_id outside [0, %lld)", static_cast<long long>(e_count));
  int64_t pos = 0;
  cs[0] = 0;
  for (size_t e = 0; e < ue; ++e) {
    const int64_t first = pos;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t n = hist[static_cast<size_t>(c) * ue + e];
      hist[static_cast<size_t>(c) * ue + e] = pos;
      pos += n;
    }
    cnt[e] = static_cast<int32_t>(pos - first);
    cs[e + 1] = static_cast<int32_t>(pos);
  }
  parallel_rows(chunks, 1, static_cast<int>(chunks), 0, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* h = hist.data() + c * e_count;
      const int64_t b = c * len, e = b + len < pairs ? b + len : pairs;
      for (int64_t j = b; j < e; ++j) s[h[static_cast<uint32_t>(id[j])]++] = static_cast<int32_t>(j);
    }
  });
  return 0;
}
