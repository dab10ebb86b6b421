// atrex-template: chunk_hist
// atrex-description: two-level counting sort over THREADS contiguous chunks of the flat topk_ids: each std::thread histograms its chunk, one serial pass turns the chunk histograms into padded segment starts and per-chunk write offsets, then every chunk scatters its own indices (stable overall) and writes the pads of the segments it ends; threads only when T*k reaches MIN_KPAIRS thousand
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
  const auto ne = static_cast<uint32_t>(e_count);
  const int64_t chunks = pairs >= int64_t{MIN_KPAIRS} * 1000 ? THREADS : 1;
  const int64_t len = (pairs + chunks - 1) / chunks;
  // hist[c * E + e]: chunk c's count of expert e, then its first write position.
  std::vector<int64_t> hist(static_cast<size_t>(chunks) * ue, 0);
  parallel_rows(chunks, 1, static_cast<int>(chunks), 0, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* h = hist.data() + c * e_count;
      const int64_t b = c * len, e = b + len < pairs ? b + len : pairs;
      for (int64_t j = b; j < e; ++j) {
        const uint32_t x = static_cast<uint32_t>(id[j]);
        if (x < ne) ++h[x];
      }
    }
  });
  std::vector<int64_t> fill(ue), end(ue);  // where expert e's pads start; its segment's end
  int64_t pos = 0;
  for (size_t e = 0; e < ue; ++e) {
    int64_t at = pos;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t n = hist[static_cast<size_t>(c) * ue + e];
      hist[static_cast<size_t>(c) * ue + e] = at;
      at += n;
    }
    fill[e] = at;
    pos += (at - pos + block - 1) / block * block;
    end[e] = pos;
  }
  if (pos > sorted->shape[0] || pos / block > experts->shape[0])
    return fail("moe_align_block_size: padded length %lld exceeds the outputs",
                static_cast<long long>(pos));
  const auto pad = static_cast<int32_t>(pairs);
  parallel_rows(chunks, 1, static_cast<int>(chunks), 0, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* h = hist.data() + c * e_count;
      const int64_t b = c * len, e = b + len < pairs ? b + len : pairs;
      for (int64_t j = b; j < e; ++j) {
        const uint32_t x = static_cast<uint32_t>(id[j]);
        if (x < ne) s[h[x]++] = static_cast<int32_t>(j);
      }
      // Chunk c writes the pads and block ids of experts [c*E/chunks, (c+1)*E/chunks).
      const size_t e0 = static_cast<size_t>(c) * ue / static_cast<size_t>(chunks);
      const size_t e1 = static_cast<size_t>(c + 1) * ue / static_cast<size_t>(chunks);
      for (size_t x = e0; x < e1; ++x) {
        for (int64_t j = fill[x]; j < end[x]; ++j) s[j] = pad;
        const int64_t start = x ? end[x - 1] : 0;
        for (int64_t q = start / block; q < end[x] / block; ++q) ex[q] = static_cast<int32_t>(x);
      }
    }
  });
  static_cast<int32_t*>(post->data)[0] = static_cast<int32_t>(pos);
  return 0;
}
