// chunk_delta_rule_output reference re-expressed as a cuda candidate (atrex candidate ABI v1):
// one block per (batch, token, v head) row; the row's masked attention weights live in shared
// memory, then each thread produces output lanes j = threadIdx.x, + blockDim.x, ...
#include <cmath>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

__device__ float ld(const unsigned short* p, int64_t i) {
  return __bfloat162float(__ushort_as_bfloat16(p[i]));
}

__global__ void chunk_o_kernel(const unsigned short* q, const unsigned short* k,
                               const unsigned short* v, const unsigned short* h, const float* g,
                               unsigned short* out, int64_t tokens, int64_t hq, int64_t hv,
                               int64_t dk, int64_t dv, int64_t cs, int64_t chunks, float scale) {
  extern __shared__ float attn[];  // [cs]
  const int64_t row = blockIdx.x;
  const int64_t head = row % hv, t = (row / hv) % tokens, b = row / (hv * tokens);
  const int64_t per = hv / hq > 1 ? hv / hq : 1;
  const int64_t qh = head / per < hq - 1 ? head / per : hq - 1;
  const int64_t c = t / cs, start = c * cs;
  const unsigned short* qrow = q + ((b * tokens + t) * hq + qh) * dk;
  const float gt = g[(b * tokens + t) * hv + head];
  for (int64_t s = start + threadIdx.x; s <= t; s += blockDim.x) {
    const unsigned short* krow = k + ((b * tokens + s) * hq + qh) * dk;
    float dot = 0;
    for (int64_t d = 0; d < dk; ++d) dot += ld(qrow, d) * ld(krow, d);
    const float gd = gt - g[(b * tokens + s) * hv + head];
    attn[s - start] = gd <= 0.0f ? __bfloat162float(__float2bfloat16_rn(dot * expf(gd))) : 0.0f;
  }
  __syncthreads();
  const unsigned short* hc = h + ((b * chunks + c) * hv + head) * dk * dv;
  const float eg = expf(gt);
  for (int64_t j = threadIdx.x; j < dv; j += blockDim.x) {
    float inter = 0;
    for (int64_t d = 0; d < dk; ++d) inter += ld(qrow, d) * ld(hc, d * dv + j);
    float intra = 0;
    for (int64_t s = start; s <= t; ++s)
      intra += attn[s - start] * ld(v, ((b * tokens + s) * hv + head) * dv + j);
    out[((b * tokens + t) * hv + head) * dv + j] =
        __bfloat16_as_ushort(__float2bfloat16_rn((inter * eg + intra) * scale));
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* h = atrex_input(launch, "h");
  const DLTensor* g = atrex_input(launch, "g");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !k || !v || !h || !g || !out) return 1;
  const int64_t batch = q->shape[0], tokens = q->shape[1], hq = q->shape[2], dk = q->shape[3];
  const int64_t hv = v->shape[2], dv = v->shape[3], chunks = h->shape[1];
  const int64_t cs = atrex_param_int(launch, "chunk_size", 64);
  const float scale = static_cast<float>(
      atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(dk))));
  const int64_t rows = batch * tokens * hv;
  if (rows == 0) return 0;
  chunk_o_kernel<<<static_cast<unsigned>(rows), 128, static_cast<size_t>(cs) * sizeof(float),
                   static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const unsigned short*>(q->data), static_cast<const unsigned short*>(k->data),
      static_cast<const unsigned short*>(v->data), static_cast<const unsigned short*>(h->data),
      static_cast<const float*>(g->data), static_cast<unsigned short*>(out->data), tokens, hq, hv,
      dk, dv, cs, chunks, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
