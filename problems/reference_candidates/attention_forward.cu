// Reference re-expressed as a cuda candidate: attention_forward.
// q, k, v [T, H, d] bf16 packed by cu_seqlens_q / cu_seqlens_k [S + 1] int32; for each sequence
// and head, out = bf16(softmax(q k^T / sqrt(d)) v) over that sequence's keys (no mask), fp32.
// One thread per (head, token), token fastest so a warp reads the same key rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

constexpr int kMaxDim = 256;

__global__ void attention_forward_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                         const int32_t* cu_q, const int32_t* cu_k, __nv_bfloat16* out,
                                         int64_t tokens, int64_t seqs, int64_t heads, int64_t dim, float scale) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * heads) return;
  const int64_t h = idx / tokens, t = idx % tokens;
  if (t < cu_q[0] || t >= cu_q[seqs]) return;
  int64_t lo = 0, hi = seqs - 1;  // last sequence starting at or before t
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu_q[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int64_t k0 = cu_k[lo], nk = cu_k[lo + 1] - cu_k[lo];
  const __nv_bfloat16* qr = q + (t * heads + h) * dim;
  float mx = -INFINITY;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = k + ((k0 + j) * heads + h) * dim;
    float dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    mx = fmaxf(mx, dot * scale);
  }
  float acc[kMaxDim];
  for (int64_t i = 0; i < dim; ++i) acc[i] = 0;
  float sum = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = k + ((k0 + j) * heads + h) * dim;
    const __nv_bfloat16* vr = v + ((k0 + j) * heads + h) * dim;
    float dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    const float p = expf(dot * scale - mx);
    sum += p;
    for (int64_t i = 0; i < dim; ++i) acc[i] += p * __bfloat162float(vr[i]);
  }
  for (int64_t i = 0; i < dim; ++i) out[(t * heads + h) * dim + i] = __float2bfloat16_rn(nk ? acc[i] / sum : 0.0f);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* cu_q = atrex_input(launch, "cu_seqlens_q");
  const DLTensor* cu_k = atrex_input(launch, "cu_seqlens_k");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !k || !v || !cu_q || !cu_k || !out || q->ndim != 3 || q->shape[2] > kMaxDim) return 1;
  const int64_t tokens = q->shape[0], heads = q->shape[1], dim = q->shape[2];
  const int64_t n = tokens * heads;
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
  attention_forward_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(q->data), static_cast<const __nv_bfloat16*>(k->data),
      static_cast<const __nv_bfloat16*>(v->data), static_cast<const int32_t*>(cu_q->data),
      static_cast<const int32_t*>(cu_k->data), static_cast<__nv_bfloat16*>(out->data), tokens, cu_q->shape[0] - 1, heads,
      dim, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
