// causal_conv1d reference re-expressed as a cuda candidate (atrex candidate ABI v1): one thread
// per output element; fp32 accumulation, conv rounded to bf16, then silu.
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

__device__ float ld(const unsigned short* p, int64_t i) {
  return __bfloat162float(__ushort_as_bfloat16(p[i]));
}

__global__ void conv_kernel(const unsigned short* x, const unsigned short* w,
                            const unsigned short* b, const unsigned short* st, unsigned short* out,
                            int64_t dim, int64_t tokens, int64_t width, bool silu) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= dim * tokens) return;
  const int64_t d = i / tokens, t = i % tokens;
  float acc = ld(b, d);
  for (int64_t j = 0; j < width; ++j) {
    const int64_t p = t + j - (width - 1);
    acc += ld(w, d * width + j) *
           (p < 0 ? ld(st, d * (width - 1) + (width - 1) + p) : ld(x, d * tokens + p));
  }
  const float conv = __bfloat162float(__float2bfloat16_rn(acc));
  out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(silu ? conv / (1.0f + expf(-conv)) : conv));
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* b = atrex_input(launch, "bias");
  const DLTensor* st = atrex_input(launch, "initial_state");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !b || !st || !out) return 1;
  const int64_t dim = x->shape[0], tokens = x->shape[1], width = w->shape[1];
  const AtrexParam* act = atrex_param(launch, "activation");
  const bool silu = !act || std::strcmp(act->string_value, "none") != 0;
  const int64_t n = dim * tokens;
  conv_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const unsigned short*>(x->data), static_cast<const unsigned short*>(w->data),
      static_cast<const unsigned short*>(b->data), static_cast<const unsigned short*>(st->data),
      static_cast<unsigned short*>(out->data), dim, tokens, width, silu);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
