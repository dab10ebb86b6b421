// fused_qkv_rope reference re-expressed as a cuda candidate (atrex candidate ABI v1): one
// thread per output lane; NeoX rotation of the first rope_dim lanes of q and k by
// position / rope_base^(2i / rope_dim) in fp32; bf16 or fp16 by qkv's dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

__device__ float load(const unsigned short* p, int64_t i, bool fp16) {
  return fp16 ? __half2float(__ushort_as_half(p[i])) : __bfloat162float(__ushort_as_bfloat16(p[i]));
}

__device__ unsigned short to_bits(float v, bool fp16) {
  return fp16 ? __half_as_ushort(__float2half_rn(v)) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__global__ void rope_kernel(const unsigned short* qkv, const int* pos, unsigned short* q,
                            unsigned short* k, unsigned short* v, int64_t tokens, int64_t hq,
                            int64_t hkv, int64_t dim, int64_t rope, float base, bool fp16) {
  const int64_t heads = hq + 2 * hkv;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * heads * dim) return;
  const int64_t d = i % dim, h = (i / dim) % heads, t = i / (dim * heads);
  unsigned short* dst;
  if (h < hq)
    dst = q + (t * hq + h) * dim;
  else if (h < hq + hkv)
    dst = k + (t * hkv + h - hq) * dim;
  else
    dst = v + (t * hkv + h - hq - hkv) * dim;
  const unsigned short* src = qkv + (t * heads + h) * dim;
  if (h >= hq + hkv || d >= rope) {
    dst[d] = src[d];
    return;
  }
  const int64_t half = rope / 2, f = d % half;
  const float angle = static_cast<float>(pos[t]) *
                      (1.0f / powf(base, static_cast<float>(2 * f) / static_cast<float>(rope)));
  const float other = d < half ? -load(src, d + half, fp16) : load(src, d - half, fp16);
  dst[d] = to_bits(load(src, d, fp16) * cosf(angle) + other * sinf(angle), fp16);
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* qkv = atrex_input(launch, "qkv");
  const DLTensor* pos = atrex_input(launch, "positions");
  const DLTensor* q = atrex_output(launch, "q");
  const DLTensor* k = atrex_output(launch, "k");
  const DLTensor* v = atrex_output(launch, "v");
  if (!qkv || !pos || !q || !k || !v) return 1;
  const int64_t tokens = qkv->shape[0];
  const int64_t hq = atrex_param_int(launch, "num_heads", 0),
                hkv = atrex_param_int(launch, "num_kv_heads", 0);
  const int64_t dim = atrex_param_int(launch, "head_dim", 0),
                rope = atrex_param_int(launch, "rope_dim", dim);
  const float base = static_cast<float>(atrex_param_float(launch, "rope_base", 10000.0));
  const int64_t n = tokens * (hq + 2 * hkv) * dim;
  if (n == 0) return 0;
  rope_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const unsigned short*>(qkv->data), static_cast<const int*>(pos->data),
      static_cast<unsigned short*>(q->data), static_cast<unsigned short*>(k->data),
      static_cast<unsigned short*>(v->data), tokens, hq, hkv, dim, rope, base,
      qkv->dtype.code == kDLFloat);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
