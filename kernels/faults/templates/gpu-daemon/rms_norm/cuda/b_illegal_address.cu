// atrex-template: b_illegal_address
// atrex-description: FAULT: writes through a wild device pointer (sticky cudaErrorIllegalAddress); the child dies, the runner lives on
#include <cuda_runtime.h>

#include "atrex/candidate.h"

__global__ void scribble(int* p) { p[threadIdx.x + (1ll << 40)] = 1; }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* out = atrex_output(launch, "out");
  scribble<<<1, 32, 0, static_cast<cudaStream_t>(launch->stream)>>>(static_cast<int*>(out->data));
  return 0;
}
