// Reference re-expressed as a cuda candidate: moe_count_and_sort (one block of 1024 threads;
// counts in shared memory). Tokens of one expert land in atomic order, which the comparison
// accepts (order within an expert is free).
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 1024;

__global__ void count_sort_kernel(const int32_t* ids, int64_t pairs, int64_t experts,
                                  int32_t* sorted, int32_t* counts, int32_t* cumsum) {
  extern __shared__ int32_t smem[];
  int32_t* count = smem;             // [E]
  int32_t* cursor = smem + experts;  // [E]
  for (int64_t e = threadIdx.x; e < experts; e += kThreads) count[e] = cursor[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
    if (ids[i] >= 0 && ids[i] < experts) atomicAdd(&count[ids[i]], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    cumsum[0] = 0;
    for (int64_t e = 0; e < experts; ++e) {
      cursor[e] = run;
      run += count[e];
      counts[e] = count[e];
      cumsum[e + 1] = run;
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
    if (ids[i] >= 0 && ids[i] < experts)
      sorted[atomicAdd(&cursor[ids[i]], 1)] = static_cast<int32_t>(i);
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* sorted = atrex_output(launch, "sorted_token_ids");
  const DLTensor* counts = atrex_output(launch, "expert_token_counts");
  const DLTensor* cumsum = atrex_output(launch, "cumsum");
  const int64_t num_experts = atrex_param_int(launch, "num_experts", 128);
  if (!ids || !sorted || !counts || !cumsum || num_experts < 1 || num_experts > 6000) return 1;
  const size_t smem = static_cast<size_t>(2 * num_experts) * sizeof(int32_t);
  count_sort_kernel<<<1, kThreads, smem, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const int32_t*>(ids->data), atrex_numel(ids), num_experts,
      static_cast<int32_t*>(sorted->data), static_cast<int32_t*>(counts->data),
      static_cast<int32_t*>(cumsum->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
