// WRONG on the GPU: computes nothing, only zeroes the output (all-zero output must fail).
#include <cuda_runtime.h>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* out = atrex_output(launch, "out");
  cudaMemsetAsync(out->data, 0, atrex_numel(out) * 2, static_cast<cudaStream_t>(launch->stream));
  return 0;
}
