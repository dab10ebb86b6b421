// Reference re-expressed as a cuda candidate: unified_attention.
// q [T, Hq, d] bf16; k_cache, v_cache [num_blocks, bs, Hkv, d] bf16; cu_seqlens_q [S + 1],
// seqused_k [S], block_table [S, max_blocks] int32. Key j of sequence s is cache slot
// block_table[s, j / bs] * bs + j % bs; query head h reads kv head h / (Hq / Hkv). Causal when
// the sequence's q_len == kv_len. out = bf16(softmax(q k^T / sqrt(d)) v), fp32 arithmetic.
// One thread per (head, token), token fastest.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

constexpr int kMaxDim = 256;

struct Args {
  const __nv_bfloat16 *q, *k, *v;
  const int32_t *cu_q, *used, *table;
  __nv_bfloat16* out;
  int64_t tokens, seqs, hq, hkv, dim, bs, max_blocks;
  float scale;
};

__device__ int64_t slot_offset(const Args& a, int64_t s, int64_t j, int64_t kvh) {
  const int64_t slot = static_cast<int64_t>(a.table[s * a.max_blocks + j / a.bs]) * a.bs + j % a.bs;
  return (slot * a.hkv + kvh) * a.dim;
}

__global__ void unified_attention_kernel(Args a) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.tokens * a.hq) return;
  const int64_t h = idx / a.tokens, t = idx % a.tokens;
  if (t < a.cu_q[0] || t >= a.cu_q[a.seqs]) return;
  int64_t lo = 0, hi = a.seqs - 1;  // last sequence starting at or before t
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (a.cu_q[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t s = lo, q_len = a.cu_q[s + 1] - a.cu_q[s], kv_len = a.used[s];
  const int64_t nk = q_len == kv_len ? t - a.cu_q[s] + 1 : kv_len;
  const int64_t kvh = h / (a.hq / a.hkv);
  const __nv_bfloat16* qr = a.q + (t * a.hq + h) * a.dim;
  float mx = -INFINITY;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = a.k + slot_offset(a, s, j, kvh);
    float dot = 0;
    for (int64_t i = 0; i < a.dim; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    mx = fmaxf(mx, dot * a.scale);
  }
  float acc[kMaxDim];
  for (int64_t i = 0; i < a.dim; ++i) acc[i] = 0;
  float sum = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const int64_t off = slot_offset(a, s, j, kvh);
    float dot = 0;
    for (int64_t i = 0; i < a.dim; ++i)
      dot += __bfloat162float(qr[i]) * __bfloat162float(a.k[off + i]);
    const float p = expf(dot * a.scale - mx);
    sum += p;
    for (int64_t i = 0; i < a.dim; ++i) acc[i] += p * __bfloat162float(a.v[off + i]);
  }
  for (int64_t i = 0; i < a.dim; ++i)
    a.out[(t * a.hq + h) * a.dim + i] = __float2bfloat16_rn(nk ? acc[i] / sum : 0.0f);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* kc = atrex_input(launch, "k_cache");
  const DLTensor* vc = atrex_input(launch, "v_cache");
  const DLTensor* cu = atrex_input(launch, "cu_seqlens_q");
  const DLTensor* used = atrex_input(launch, "seqused_k");
  const DLTensor* table = atrex_input(launch, "block_table");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !kc || !vc || !cu || !used || !table || !out || q->ndim != 3 || kc->ndim != 4) return 1;
  if (q->shape[2] > kMaxDim) return 1;
  Args a{static_cast<const __nv_bfloat16*>(q->data),
         static_cast<const __nv_bfloat16*>(kc->data),
         static_cast<const __nv_bfloat16*>(vc->data),
         static_cast<const int32_t*>(cu->data),
         static_cast<const int32_t*>(used->data),
         static_cast<const int32_t*>(table->data),
         static_cast<__nv_bfloat16*>(out->data),
         q->shape[0],
         used->shape[0],
         q->shape[1],
         kc->shape[2],
         q->shape[2],
         kc->shape[1],
         table->shape[1],
         static_cast<float>(1.0 / sqrt(static_cast<double>(q->shape[2])))};
  const int64_t n = a.tokens * a.hq;
  unified_attention_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0,
                             static_cast<cudaStream_t>(launch->stream)>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
