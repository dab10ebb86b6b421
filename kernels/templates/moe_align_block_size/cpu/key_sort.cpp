// atrex-template: key_sort
// atrex-description: comparison sort instead of counting: every routed pair becomes one 64-bit key (expert << 32 | flat index), the keys are std::sort-ed (THREADS halves sorted on their own std::threads, then std::inplace_merge), and one walk over the sorted keys writes each expert's run, its pads (T*k) up to the block multiple and its block ids; entries past the padded length are left alone (they are not compared)
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
  const int64_t worst = pairs + e_count * (block - 1);
  if (worst > sorted->shape[0] || (worst + block - 1) / block > experts->shape[0])
    return fail("moe_align_block_size: outputs smaller than T*k + E*(block_size-1)");
  const auto* id = static_cast<const int32_t*>(ids->data);
  auto* s = static_cast<int32_t*>(sorted->data);
  auto* ex = static_cast<int32_t*>(experts->data);
  std::vector<uint64_t> keys;
  keys.reserve(static_cast<size_t>(pairs));
  for (int64_t j = 0; j < pairs; ++j) {
    const uint32_t x = static_cast<uint32_t>(id[j]);
    if (x < static_cast<uint32_t>(e_count)) keys.push_back(uint64_t{x} << 32 | static_cast<uint32_t>(j));
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
  const auto pad = static_cast<int32_t>(pairs);
  int64_t pos = 0, blocks = 0;
  for (size_t i = 0; i < keys.size();) {
    const auto e = static_cast<int32_t>(keys[i] >> 32);
    const int64_t start = pos;
    for (; i < keys.size() && static_cast<int32_t>(keys[i] >> 32) == e; ++i)
      s[pos++] = static_cast<int32_t>(keys[i] & 0xffffffffu);
    const int64_t end = start + (pos - start + block - 1) / block * block;
    for (; pos < end; ++pos) s[pos] = pad;
    for (int64_t q = start / block; q < end / block; ++q) ex[blocks++] = e;
  }
  static_cast<int32_t*>(post->data)[0] = static_cast<int32_t>(pos);
  return 0;
}
