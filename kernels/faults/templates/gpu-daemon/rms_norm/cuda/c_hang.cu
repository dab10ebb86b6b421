// atrex-template: c_hang
// atrex-description: FAULT: a kernel that spins forever; the per-shape limit kills the child, the runner lives on
#include <cuda_runtime.h>

#include "atrex/candidate.h"

__global__ void spin(volatile int* flag) {
  while (*flag == 0) {}
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static int* flag = nullptr;
  if (!flag) {
    cudaMalloc(&flag, sizeof(int));
    cudaMemset(flag, 0, sizeof(int));
  }
  spin<<<1, 1, 0, static_cast<cudaStream_t>(launch->stream)>>>(flag);
  return 0;
}
