// reshape_and_cache reference (alibaba/atrex-bench data/reshape_and_cache/reference.py, read
// 2026-11-30): the KV-cache write of vLLM's reshape_and_cache_flash. The outputs start as the
// input caches (TensorSpec::initial_from) and only the rows named by slot_mapping change.
#pragma once

#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

// key, value: [T, H, d]; caches viewed as [num_slots, H, d]; for slot_mapping[t] >= 0,
// cache[slot_mapping[t]] = row t (a bit-exact copy: same dtype). Negative slots are padding
// tokens and are skipped; a slot past the cache (torch would raise) is skipped too. One
// thread per element of key so consecutive threads write consecutive cache elements.
struct ReshapeAndCacheElement {
  const uint16_t* key;
  const uint16_t* value;
  const int64_t* slot_mapping;
  uint16_t* key_cache;
  uint16_t* value_cache;
  int64_t row_elems;  // H * d
  int64_t num_slots;  // num_blocks * block_size
  ATREX_HD void operator()(int64_t i) const {
    const int64_t t = i / row_elems, e = i % row_elems;
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= num_slots) return;
    key_cache[slot * row_elems + e] = key[i];
    value_cache[slot * row_elems + e] = value[i];
  }
};

template <class Exec>
void reshape_and_cache_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                 void* const* out) {
  const auto& key = s.inputs[0];
  const auto& cache = s.inputs[2];
  ReshapeAndCacheElement f{static_cast<const uint16_t*>(in[0]), static_cast<const uint16_t*>(in[1]),
                           static_cast<const int64_t*>(in[4]),  static_cast<uint16_t*>(out[0]),
                           static_cast<uint16_t*>(out[1]),      key.dims[1] * key.dims[2],
                           cache.dims[0] * cache.dims[1]};
  ex.for_each(key.numel(), f);
}

}  // namespace atrex::problems::ops
