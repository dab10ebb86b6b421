// Fault candidate (docs/evaluation.md "Edge-case inputs"): reshape_and_cache that ignores
// slot_mapping and writes token t to slot t. The usual draws map token t to slot t, so it passes
// every seed; the edge-case set (a seeded permutation of the cache's slots, 1 token in 8
// skipped with -1) makes it write the wrong slots, so it must be `wrong_result` there. Its
// honest twin is kernels/reference/reshape_and_cache/naive.cpp.
#include <cstring>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* key = atrex_input(launch, "key");
  const DLTensor* value = atrex_input(launch, "value");
  const DLTensor* kc = atrex_output(launch, "key_cache");
  const DLTensor* vc = atrex_output(launch, "value_cache");
  if (!key || !value || !kc || !vc || key->ndim != 3 || kc->ndim != 4) return 1;
  const int64_t tokens = key->shape[0], row = key->shape[1] * key->shape[2];
  const int64_t num_slots = kc->shape[0] * kc->shape[1];
  for (int64_t t = 0; t < tokens && t < num_slots; ++t) {
    std::memcpy(static_cast<uint16_t*>(kc->data) + t * row,
                static_cast<const uint16_t*>(key->data) + t * row, 2 * row);
    std::memcpy(static_cast<uint16_t*>(vc->data) + t * row,
                static_cast<const uint16_t*>(value->data) + t * row, 2 * row);
  }
  return 0;
}
