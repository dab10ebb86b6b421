// Reference re-expressed as a cuda candidate: fp8_blockscale_fused_moe (three naive kernels, one
// thread per output element, fp32 arithmetic on operands dequantised by their block scales):
//   x = fp8(hidden_states) * a_scale[t, h/bk]; W1 = fp8(w1) * fc1_scale[e, r/bn, h/bk];
//   W2 = fp8(w2) * fc2_scale[e, h/bk, n/bn]; act = silu(W1g . x) * (W1u . x); y = W2 . act;
//   out = fp8(sum_j topk_weights[t, j] * y) with torch's cast (rounding past 448 gives NaN).
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

__device__ float fp8_to_float(unsigned v) {
  const unsigned e = (v >> 3) & 15u, m = v & 7u;
  const float mag = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : static_cast<float>(m) * 0.001953125f;
  return (v & 0x80u) ? -mag : mag;
}

// Round to nearest even on the e4m3fn grid (c10's float8_e4m3fn conversion).
__device__ unsigned char float_to_fp8(float f) {
  const unsigned u = __float_as_uint(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a >= 0x43f00000u) return static_cast<unsigned char>(sign | 0x7fu);  // >= 480, inf, NaN
  if (a < 0x3c800000u) return static_cast<unsigned char>(sign | __float2uint_rn(__uint_as_float(a) * 512.0f));
  const unsigned r = a + 0x7ffffu + ((a >> 20) & 1u);
  return static_cast<unsigned char>(sign | (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
}

struct Dims {
  int64_t slots, k, hidden, inter, bn, bk;
};

__global__ void up_gate_kernel(const unsigned char* x, const float* a_scale, const unsigned char* w1, const float* s1,
                               const int32_t* ids, float* act, Dims d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, hb = d.hidden / d.bk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < d.slots * d.inter; i += stride) {
    const int64_t slot = i / d.inter, n = i % d.inter, t = slot / d.k, e = ids[slot];
    const int64_t rg = e * 2 * d.inter + n, ru = rg + d.inter;
    float gate = 0.0f, up = 0.0f;
    for (int64_t h = 0; h < d.hidden; ++h) {
      const float xv = fp8_to_float(x[t * d.hidden + h]) * a_scale[t * hb + h / d.bk];
      gate += xv * (fp8_to_float(w1[rg * d.hidden + h]) * s1[(rg / d.bn) * hb + h / d.bk]);
      up += xv * (fp8_to_float(w1[ru * d.hidden + h]) * s1[(ru / d.bn) * hb + h / d.bk]);
    }
    act[i] = gate / (1.0f + expf(-gate)) * up;
  }
}

__global__ void down_kernel(const float* act, const unsigned char* w2, const float* s2, const int32_t* ids, float* y,
                            Dims d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, nb = d.inter / d.bn;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < d.slots * d.hidden; i += stride) {
    const int64_t slot = i / d.hidden, h = i % d.hidden, r = static_cast<int64_t>(ids[slot]) * d.hidden + h;
    float acc = 0.0f;
    for (int64_t n = 0; n < d.inter; ++n) {
      acc += act[slot * d.inter + n] * (fp8_to_float(w2[r * d.inter + n]) * s2[(r / d.bk) * nb + n / d.bn]);
    }
    y[i] = acc;
  }
}

__global__ void combine_kernel(const float* y, const float* weights, unsigned char* out, int64_t tokens, Dims d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * d.hidden; i += stride) {
    const int64_t t = i / d.hidden, h = i % d.hidden;
    float acc = 0.0f;
    for (int64_t j = 0; j < d.k; ++j) acc += y[(t * d.k + j) * d.hidden + h] * weights[t * d.k + j];
    out[i] = float_to_fp8(acc);
  }
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(n / 256 + 1 < 65536 ? n / 256 + 1 : 65536); }

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "hidden_states");
  const DLTensor* w1 = atrex_input(launch, "w1");
  const DLTensor* w2 = atrex_input(launch, "w2");
  const DLTensor* w = atrex_input(launch, "topk_weights");
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* a_scale = atrex_input(launch, "a_scale");
  const DLTensor* fc1 = atrex_input(launch, "fc1_scale");
  const DLTensor* fc2 = atrex_input(launch, "fc2_scale");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w1 || !w2 || !w || !ids || !a_scale || !fc1 || !fc2 || !out || w2->ndim != 3 || ids->ndim != 2) return 1;
  const int64_t tokens = x->shape[0];
  const Dims d{tokens * ids->shape[1], ids->shape[1], x->shape[1], w2->shape[2],
               atrex_param_int(launch, "scale_block_n", 128), atrex_param_int(launch, "scale_block_k", 128)};
  if (d.slots == 0) return 0;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  float *act = nullptr, *y = nullptr;
  if (cudaMallocAsync(&act, static_cast<size_t>(d.slots * d.inter) * sizeof(float), stream) != cudaSuccess) return 2;
  if (cudaMallocAsync(&y, static_cast<size_t>(d.slots * d.hidden) * sizeof(float), stream) != cudaSuccess) {
    cudaFreeAsync(act, stream);
    return 2;
  }
  const auto* id = static_cast<const int32_t*>(ids->data);
  up_gate_kernel<<<grid_for(d.slots * d.inter), 256, 0, stream>>>(
      static_cast<const unsigned char*>(x->data), static_cast<const float*>(a_scale->data),
      static_cast<const unsigned char*>(w1->data), static_cast<const float*>(fc1->data), id, act, d);
  down_kernel<<<grid_for(d.slots * d.hidden), 256, 0, stream>>>(act, static_cast<const unsigned char*>(w2->data),
                                                                static_cast<const float*>(fc2->data), id, y, d);
  combine_kernel<<<grid_for(tokens * d.hidden), 256, 0, stream>>>(y, static_cast<const float*>(w->data),
                                                                  static_cast<unsigned char*>(out->data), tokens, d);
  cudaFreeAsync(act, stream);
  cudaFreeAsync(y, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
