// mrope reference re-expressed as a cuda candidate (atrex candidate ABI v1): one thread per
// (token, head, frequency) pair of q or k, plus pass-through of lanes past rotary_dim.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

struct Sections {
  int64_t s0, s1, s2;
  bool interleaved;
  __device__ int64_t axis(int64_t f) const {
    if (interleaved) {
      if (f % 3 == 1 && f <= 3 * s1) return 1;
      if (f % 3 == 2 && f <= 3 * s2) return 2;
      return 0;
    }
    return f < s0 ? 0 : (f < s0 + s1 ? 1 : 2);
  }
};

__device__ float ld(const unsigned short* p, int64_t i) {
  return __bfloat162float(__ushort_as_bfloat16(p[i]));
}
__device__ unsigned short st(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// Lanes per head handled: half rotation pairs, then (head_size - rot) copied lanes.
__global__ void mrope_kernel(const unsigned short* x, unsigned short* y, const float* cs,
                             const float* sn, Sections sec, int64_t tokens, int64_t heads,
                             int64_t hs, int64_t rot, bool neox) {
  const int64_t half = rot / 2, work = half + (hs - rot);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * heads * work) return;
  const int64_t w = i % work, h = (i / work) % heads, t = i / (work * heads);
  const int64_t base = (t * heads + h) * hs;
  if (w >= half) {
    const int64_t d = rot + (w - half);
    y[base + d] = x[base + d];
    return;
  }
  const int64_t at = (sec.axis(w) * tokens + t) * half + w;
  const int64_t i1 = base + (neox ? w : 2 * w), i2 = base + (neox ? w + half : 2 * w + 1);
  const float a = ld(x, i1), b = ld(x, i2);
  y[i1] = st(a * cs[at] - b * sn[at]);
  y[i2] = st(b * cs[at] + a * sn[at]);
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* c = atrex_input(launch, "cos");
  const DLTensor* s = atrex_input(launch, "sin");
  const DLTensor* qo = atrex_output(launch, "q");
  const DLTensor* ko = atrex_output(launch, "k");
  const AtrexParam* section = atrex_param(launch, "mrope_section");
  if (!q || !k || !c || !s || !qo || !ko || !section || section->int_list_length != 3) return 1;
  const Sections sec{section->int_list[0], section->int_list[1], section->int_list[2],
                     atrex_param_int(launch, "mrope_interleaved", 0) != 0};
  const int64_t hs = atrex_param_int(launch, "head_size", 0),
                rot = atrex_param_int(launch, "rotary_dim", hs);
  const bool neox = atrex_param_int(launch, "is_neox_style", 1) != 0;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  const DLTensor* ins[2] = {q, k};
  const DLTensor* outs[2] = {qo, ko};
  for (int which = 0; which < 2; ++which) {
    const int64_t tokens = ins[which]->shape[0], heads = ins[which]->shape[1] / hs;
    const int64_t n = tokens * heads * (rot / 2 + hs - rot);
    if (n == 0) continue;
    mrope_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
        static_cast<const unsigned short*>(ins[which]->data),
        static_cast<unsigned short*>(outs[which]->data), static_cast<const float*>(c->data),
        static_cast<const float*>(s->data), sec, tokens, heads, hs, rot, neox);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
