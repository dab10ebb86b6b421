// atrex-template: row_copy
// atrex-description: single-threaded token loop, TOKENS_PER_PASS tokens at a time: their key rows are copied (memcpy, bit-exact) to their slots, then their value rows, so each pass streams two source and two destination regions; negative slots (padding) and slots past the cache are skipped
// atrex-param: TOKENS_PER_PASS = 8 | 1, 4, 8, 32, 128
#ifndef TOKENS_PER_PASS
#define TOKENS_PER_PASS 8
#endif

#include <cstdint>
#include <cstring>

#include "atrex/candidate_util.h"

static_assert(TOKENS_PER_PASS >= 1, "TOKENS_PER_PASS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::kBF16;
using atrex::cand::kI64;

// Rows [begin, end) of src [T, row] to dst [num_slots, row] at slot_mapping[t].
void copy_rows(const uint16_t* src, uint16_t* dst, const int64_t* slot_mapping, int64_t begin,
               int64_t end, int64_t row, int64_t num_slots) {
  for (int64_t t = begin; t < end; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;
    std::memcpy(dst + slot * row, src + t * row, static_cast<size_t>(row) * sizeof(uint16_t));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "reshape_and_cache");
  const DLTensor* key = ts.input("key", kBF16, 3);      // [T, H, d]
  const DLTensor* value = ts.input("value", kBF16, 3);  // [T, H, d]
  const DLTensor* slots = ts.input("slot_mapping", kI64, 1);
  const DLTensor* kc = ts.output("key_cache", kBF16, 4);    // [num_blocks, bs, H, d]
  const DLTensor* vc = ts.output("value_cache", kBF16, 4);  // [num_blocks, bs, H, d]
  if (!ts.ok() || !ts.same_dims(key, value) || !ts.same_dims(kc, vc) ||
      !ts.dim_is(slots, 0, key->shape[0]) || !ts.dim_is(kc, 2, key->shape[1]) ||
      !ts.dim_is(kc, 3, key->shape[2]))
    return ts.failed();
  const int64_t tokens = key->shape[0], row = key->shape[1] * key->shape[2];
  const int64_t num_slots = kc->shape[0] * kc->shape[1];
  const auto* sm = static_cast<const int64_t*>(slots->data);
  const auto* kp = static_cast<const uint16_t*>(key->data);
  const auto* vp = static_cast<const uint16_t*>(value->data);
  auto* kcp = static_cast<uint16_t*>(kc->data);
  auto* vcp = static_cast<uint16_t*>(vc->data);
  for (int64_t t0 = 0; t0 < tokens; t0 += TOKENS_PER_PASS) {
    const int64_t t1 = t0 + TOKENS_PER_PASS < tokens ? t0 + TOKENS_PER_PASS : tokens;
    copy_rows(kp, kcp, sm, t0, t1, row, num_slots);
    copy_rows(vp, vcp, sm, t0, t1, row, num_slots);
  }
  return 0;
}
