// atrex-template: threaded
// atrex-description: tokens split into contiguous chunks over up to THREADS std::threads (only when the rows to move are large enough: MIN_KELEMS thousand elements per thread); each thread copies its tokens' key then value rows (memcpy, bit-exact) to their slots, skipping negative slots; distinct tokens write distinct slots in the hot shapes, and a slot named twice gets one of its rows (the reference's order is unspecified there too)
// atrex-param: THREADS = 2 | 1, 2, 3, 4
// atrex-param: MIN_KELEMS = 64 | 16, 64, 256, 1024
#ifndef THREADS
#define THREADS 2
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <cstdint>
#include <cstring>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::kBF16;
using atrex::cand::kI64;
using atrex::cand::parallel_rows;

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
  parallel_rows(tokens, 2 * row, THREADS, int64_t{MIN_KELEMS} * 1024,
                [=](int64_t begin, int64_t end) {
                  copy_rows(kp, kcp, sm, begin, end, row, num_slots);
                  copy_rows(vp, vcp, sm, begin, end, row, num_slots);
                });
  return 0;
}
