// Reference re-expressed as a cuda candidate: mla_decode_attention.
// q [B, H, r + rope] bf16; kv_cache [sum(seq_lens), 1, r + rope] bf16, sequence b owning rows
// sum(seq_lens[:b]) .. + seq_lens[b]; seq_lens [B] int32. Keys are whole rows, values their first
// r = kv_lora_rank elements; out [B, H, r] = bf16(softmax(q k^T / sqrt(r + rope)) v), fp32.
// One thread per (batch, head).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

constexpr int kMaxRank = 512;

__global__ void mla_decode_kernel(const __nv_bfloat16* q, const __nv_bfloat16* kv,
                                  const int32_t* lens, __nv_bfloat16* out, int64_t batch,
                                  int64_t heads, int64_t qk, int64_t rank, float scale) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= batch * heads) return;
  const int64_t b = idx / heads;
  int64_t start = 0;
  for (int64_t i = 0; i < b; ++i) start += lens[i];
  const int64_t nk = lens[b] > 0 ? lens[b] : 0;
  const __nv_bfloat16* qr = q + idx * qk;
  float mx = -INFINITY;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = kv + (start + j) * qk;
    float dot = 0;
    for (int64_t i = 0; i < qk; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    mx = fmaxf(mx, dot * scale);
  }
  float acc[kMaxRank];
  for (int64_t i = 0; i < rank; ++i) acc[i] = 0;
  float sum = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = kv + (start + j) * qk;
    float dot = 0;
    for (int64_t i = 0; i < qk; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    const float p = expf(dot * scale - mx);
    sum += p;
    for (int64_t i = 0; i < rank; ++i) acc[i] += p * __bfloat162float(kr[i]);
  }
  for (int64_t i = 0; i < rank; ++i)
    out[idx * rank + i] = __float2bfloat16_rn(nk ? acc[i] / sum : 0.0f);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* kv = atrex_input(launch, "kv_cache");
  const DLTensor* lens = atrex_input(launch, "seq_lens");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !kv || !lens || !out || q->ndim != 3 || out->ndim != 3 || out->shape[2] > kMaxRank)
    return 1;
  const int64_t batch = q->shape[0], heads = q->shape[1], qk = q->shape[2], n = batch * heads;
  mla_decode_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0,
                      static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(q->data), static_cast<const __nv_bfloat16*>(kv->data),
      static_cast<const int32_t*>(lens->data), static_cast<__nv_bfloat16*>(out->data), batch, heads,
      qk, out->shape[2], static_cast<float>(1.0 / sqrt(static_cast<double>(qk))));
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
