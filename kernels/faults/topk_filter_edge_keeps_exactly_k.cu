// Fault candidate, cuda twin of topk_filter_edge_keeps_exactly_k.cpp: keeps exactly k values per
// row (values tied at the k-th one only until k are kept), where the reference keeps every tie.
// Identical on rows without ties (every usual draw); must be `wrong_result` on the edge-case set.
// Otherwise kernels/reference/topk_filter/naive.cu, its honest twin: one block per row. The k-th
// largest value is found bit by bit over an order-preserving key of the floats: the largest key t
// with at least k elements >= t (32 counting passes over the row).
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;

__device__ unsigned key_of(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void topk_filter_kernel(const float* logits, float* out, int64_t vocab, int64_t k) {
  __shared__ unsigned long long count;
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float* o = out + static_cast<int64_t>(blockIdx.x) * vocab;
  unsigned t = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const unsigned cand = t | (1u << bit);
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    unsigned long long mine = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) mine += key_of(x[i]) >= cand;
    atomicAdd(&count, mine);
    __syncthreads();
    if (count >= static_cast<unsigned long long>(k)) t = cand;
    __syncthreads();
  }
  const float threshold = __uint_as_float((t & 0x80000000u) ? (t & 0x7fffffffu) : ~t);
  // The shortcut: values above the threshold are kept; of those equal to it, only as many as
  // fill k (first come, first kept), so a row never keeps more than k values.
  __shared__ unsigned long long above, kept_ties;
  if (threadIdx.x == 0) above = kept_ties = 0;
  __syncthreads();
  unsigned long long mine_above = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) mine_above += x[i] > threshold;
  atomicAdd(&above, mine_above);
  __syncthreads();
  const unsigned long long ties_room = static_cast<unsigned long long>(k) - above;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    bool keep = x[i] > threshold;
    if (x[i] == threshold) keep = atomicAdd(&kept_ties, 1ull) < ties_room;
    o[i] = keep ? x[i] : -INFINITY;
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* logits = atrex_input(launch, "logits");
  const DLTensor* out = atrex_output(launch, "out");
  if (!logits || !out || logits->ndim != 2) return 1;
  const int64_t rows = logits->shape[0], vocab = logits->shape[1];
  int64_t k = atrex_param_int(launch, "top_k", 50);
  if (k > vocab) k = vocab;
  if (k < 1) return 2;
  if (rows == 0) return 0;
  topk_filter_kernel<<<static_cast<unsigned>(rows), kThreads, 0,
                       static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const float*>(logits->data), static_cast<float*>(out->data), vocab, k);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
