// Reference re-expressed as a cpu candidate: reshape_and_cache.
// key, value [T, H, d] bf16; key_cache / value_cache outputs [num_blocks, bs, H, d] arrive holding
// the input caches (in-place semantics); row t is copied to slot slot_mapping[t] (int64) unless
// that slot is negative. Nothing else is touched.
#include <cstring>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* key = atrex_input(launch, "key");
  const DLTensor* value = atrex_input(launch, "value");
  const DLTensor* slots = atrex_input(launch, "slot_mapping");
  const DLTensor* kc = atrex_output(launch, "key_cache");
  const DLTensor* vc = atrex_output(launch, "value_cache");
  if (!key || !value || !slots || !kc || !vc || key->ndim != 3 || kc->ndim != 4) return 1;
  const int64_t tokens = key->shape[0], row = key->shape[1] * key->shape[2];
  const int64_t num_slots = kc->shape[0] * kc->shape[1];
  const auto* sm = static_cast<const int64_t*>(slots->data);
  for (int64_t t = 0; t < tokens; ++t) {
    if (sm[t] < 0 || sm[t] >= num_slots) continue;
    std::memcpy(static_cast<uint16_t*>(kc->data) + sm[t] * row,
                static_cast<const uint16_t*>(key->data) + t * row, 2 * row);
    std::memcpy(static_cast<uint16_t*>(vc->data) + sm[t] * row,
                static_cast<const uint16_t*>(value->data) + t * row, 2 * row);
  }
  return 0;
}
