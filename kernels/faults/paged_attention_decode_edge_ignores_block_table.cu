// Fault candidate, cuda twin of paged_attention_decode_edge_ignores_block_table.cpp: ignores
// block_tables and reads key j of sequence s from block s * max_blocks + j / bs (the identity
// table the usual draws give); must be `wrong_result` on the edge-case set (permuted blocks).
// Otherwise kernels/reference/paged_attention_decode/naive.cu, its honest twin:
//
// Reference re-expressed as a cuda candidate: paged_attention_decode.
// query [B, Hq, d]; k_cache [num_blocks, Hkv, d/8, bs, 8]; v_cache [num_blocks, Hkv, d, bs]
// (bf16 or fp16, the tensors' dtype); block_tables [B, max_blocks], seq_lens [B] int32. Key j
// of sequence s is position j % bs of block block_tables[s, j / bs]; query head h reads kv head
// h / (Hq / Hkv). out = softmax(q k^T / sqrt(d)) v in fp32, rounded to the query dtype.
// One thread per (sequence, head).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

constexpr int kMaxDim = 256;

struct Args {
  const uint16_t *q, *k, *v;
  const int32_t *table, *lens;
  uint16_t* out;
  int64_t seqs, hq, hkv, dim, bs, max_blocks;
  bool fp16;
  float scale;
};

__device__ float load(const Args& a, const uint16_t* p, int64_t i) {
  return a.fp16 ? __half2float(__ushort_as_half(p[i]))
                : __bfloat162float(__ushort_as_bfloat16(p[i]));
}

// (block, kv head) base of key j: both caches hold d * bs elements per (block, head).
__device__ int64_t block_base(const Args& a, int64_t s, int64_t j, int64_t kvh) {
  return ((s * a.max_blocks + j / a.bs) * a.hkv + kvh) * a.dim * a.bs;
}

__device__ float score(const Args& a, const uint16_t* qr, int64_t s, int64_t j, int64_t kvh) {
  const int64_t base = block_base(a, s, j, kvh) + (j % a.bs) * 8;
  float dot = 0;
  for (int64_t i = 0; i < a.dim; ++i)
    dot += load(a, qr, i) * load(a, a.k, base + (i / 8) * a.bs * 8 + i % 8);
  return dot * a.scale;
}

__global__ void paged_attention_decode_kernel(Args a) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.seqs * a.hq) return;
  const int64_t s = idx / a.hq, h = idx % a.hq, kvh = h / (a.hq / a.hkv);
  const int64_t nk = a.lens[s] > 0 ? a.lens[s] : 0;
  const uint16_t* qr = a.q + idx * a.dim;
  float mx = -INFINITY;
  for (int64_t j = 0; j < nk; ++j) mx = fmaxf(mx, score(a, qr, s, j, kvh));
  float acc[kMaxDim];
  for (int64_t i = 0; i < a.dim; ++i) acc[i] = 0;
  float sum = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const float p = expf(score(a, qr, s, j, kvh) - mx);
    sum += p;
    const int64_t base = block_base(a, s, j, kvh) + j % a.bs;
    for (int64_t i = 0; i < a.dim; ++i) acc[i] += p * load(a, a.v, base + i * a.bs);
  }
  for (int64_t i = 0; i < a.dim; ++i) {
    const float o = nk ? acc[i] / sum : 0.0f;
    a.out[idx * a.dim + i] = a.fp16 ? __half_as_ushort(__float2half_rn(o))
                                    : __bfloat16_as_ushort(__float2bfloat16_rn(o));
  }
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* query = atrex_input(launch, "query");
  const DLTensor* kc = atrex_input(launch, "k_cache");
  const DLTensor* vc = atrex_input(launch, "v_cache");
  const DLTensor* table = atrex_input(launch, "block_tables");
  const DLTensor* lens = atrex_input(launch, "seq_lens");
  const DLTensor* out = atrex_output(launch, "out");
  if (!query || !kc || !vc || !table || !lens || !out || query->ndim != 3 || vc->ndim != 4)
    return 1;
  if (query->shape[2] > kMaxDim) return 1;
  Args a{static_cast<const uint16_t*>(query->data),
         static_cast<const uint16_t*>(kc->data),
         static_cast<const uint16_t*>(vc->data),
         static_cast<const int32_t*>(table->data),
         static_cast<const int32_t*>(lens->data),
         static_cast<uint16_t*>(out->data),
         query->shape[0],
         query->shape[1],
         vc->shape[1],
         query->shape[2],
         vc->shape[3],
         table->shape[1],
         query->dtype.code == kDLFloat,
         static_cast<float>(1.0 / sqrt(static_cast<double>(query->shape[2])))};
  const int64_t n = a.seqs * a.hq;
  paged_attention_decode_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0,
                                  static_cast<cudaStream_t>(launch->stream)>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
