// Reference re-expressed as a cuda candidate: moe_align_block_size (one block of 1024 threads;
// expert counters in shared memory). Tokens of one expert land in atomic order, which the
// comparison accepts (order within an expert is free); padding is T*k.
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 1024;

__global__ void align_kernel(const int32_t* ids, int64_t pairs, int64_t experts, int64_t block,
                             int32_t* sorted, int64_t sorted_len, int32_t* expert_ids,
                             int64_t blocks_len, int32_t* post_pad) {
  extern __shared__ int32_t smem[];
  int32_t* count = smem;                 // [E]
  int32_t* cursor = smem + experts;      // [E]
  int32_t* offset = smem + 2 * experts;  // [E + 1]
  for (int64_t e = threadIdx.x; e < experts; e += kThreads) count[e] = cursor[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
    if (ids[i] >= 0 && ids[i] < experts) atomicAdd(&count[ids[i]], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    offset[0] = 0;
    for (int64_t e = 0; e < experts; ++e)
      offset[e + 1] = offset[e] + (count[e] + block - 1) / block * block;
    post_pad[0] = offset[experts];
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
    const int32_t e = ids[i];
    if (e >= 0 && e < experts)
      sorted[offset[e] + atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
  for (int64_t e = threadIdx.x; e < experts; e += kThreads) {
    for (int64_t s = offset[e] + count[e]; s < offset[e + 1]; ++s)
      sorted[s] = static_cast<int32_t>(pairs);
    for (int64_t b = offset[e] / block; b < offset[e + 1] / block; ++b)
      expert_ids[b] = static_cast<int32_t>(e);
  }
  const int64_t total = offset[experts];
  for (int64_t s = total + threadIdx.x; s < sorted_len; s += kThreads)
    sorted[s] = static_cast<int32_t>(pairs);
  for (int64_t b = total / block + threadIdx.x; b < blocks_len; b += kThreads) expert_ids[b] = -1;
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* sorted = atrex_output(launch, "sorted_token_ids");
  const DLTensor* experts = atrex_output(launch, "expert_ids");
  const DLTensor* post = atrex_output(launch, "num_tokens_post_pad");
  const int64_t num_experts = atrex_param_int(launch, "num_experts", 0),
                block = atrex_param_int(launch, "block_size", 0);
  if (!ids || !sorted || !experts || !post || num_experts < 1 || block < 1 || num_experts > 4000)
    return 1;
  const size_t smem = static_cast<size_t>(3 * num_experts + 1) * sizeof(int32_t);
  align_kernel<<<1, kThreads, smem, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const int32_t*>(ids->data), atrex_numel(ids), num_experts, block,
      static_cast<int32_t*>(sorted->data), atrex_numel(sorted),
      static_cast<int32_t*>(experts->data), atrex_numel(experts),
      static_cast<int32_t*>(post->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
