// Fault candidate, cuda twin of reshape_and_cache_edge_ignores_slot_mapping.cpp: writes token t
// to slot t whatever slot_mapping says (the usual draws map t to t); must be `wrong_result` on the
// edge-case set (permuted slots, 1 token in 8 skipped). Otherwise
// kernels/reference/reshape_and_cache/naive.cu, its honest twin:
//
// Reference re-expressed as a cuda candidate: reshape_and_cache.
// key, value [T, H, d] bf16; key_cache / value_cache outputs [num_blocks, bs, H, d] arrive holding
// the input caches (in-place semantics); row t is copied to slot slot_mapping[t] (int64) unless
// that slot is negative. One thread per element of key.
#include <cuda_runtime.h>

#include "atrex/candidate.h"

__global__ void reshape_and_cache_kernel(const uint16_t* key, const uint16_t* value,
                                         const int64_t* slots, uint16_t* key_cache,
                                         uint16_t* value_cache, int64_t n, int64_t row,
                                         int64_t num_slots) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t slot = i / row, e = i % row;  // slot_mapping ignored: token t -> slot t
  (void)slots;
  if (slot < 0 || slot >= num_slots) return;
  key_cache[slot * row + e] = key[i];
  value_cache[slot * row + e] = value[i];
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* key = atrex_input(launch, "key");
  const DLTensor* value = atrex_input(launch, "value");
  const DLTensor* slots = atrex_input(launch, "slot_mapping");
  const DLTensor* kc = atrex_output(launch, "key_cache");
  const DLTensor* vc = atrex_output(launch, "value_cache");
  if (!key || !value || !slots || !kc || !vc || key->ndim != 3 || kc->ndim != 4) return 1;
  const int64_t n = atrex_numel(key), row = key->shape[1] * key->shape[2];
  reshape_and_cache_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                             static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const uint16_t*>(key->data), static_cast<const uint16_t*>(value->data),
      static_cast<const int64_t*>(slots->data), static_cast<uint16_t*>(kc->data),
      static_cast<uint16_t*>(vc->data), n, row, kc->shape[0] * kc->shape[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
