// Reference re-expressed as a cuda candidate: fused_moe (three naive kernels, one thread per
// output element, fp32 arithmetic; intermediates in stream-ordered scratch).
//   act[t, j, n] = silu(W1[e, n] . x[t]) * (W1[e, N + n] . x[t]),  e = topk_ids[t, j]
//   y[t, j, h]   = W2[e, h] . act[t, j]
//   out[t, h]    = sum_j topk_weights[t, j] * y[t, j, h]              (fp32 out)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

__global__ void up_gate_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w1, const int32_t* ids, float* act,
                               int64_t slots, int64_t k, int64_t hidden, int64_t inter) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < slots * inter; i += stride) {
    const int64_t slot = i / inter, n = i % inter, t = slot / k, e = ids[slot];
    const __nv_bfloat16* xr = x + t * hidden;
    const __nv_bfloat16* g = w1 + (e * 2 * inter + n) * hidden;
    const __nv_bfloat16* u = g + inter * hidden;
    float gate = 0.0f, up = 0.0f;
    for (int64_t h = 0; h < hidden; ++h) {
      const float xv = __bfloat162float(xr[h]);
      gate += xv * __bfloat162float(g[h]);
      up += xv * __bfloat162float(u[h]);
    }
    act[i] = gate / (1.0f + expf(-gate)) * up;
  }
}

__global__ void down_kernel(const float* act, const __nv_bfloat16* w2, const int32_t* ids, float* y, int64_t slots,
                            int64_t hidden, int64_t inter) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < slots * hidden; i += stride) {
    const int64_t slot = i / hidden, h = i % hidden;
    const float* a = act + slot * inter;
    const __nv_bfloat16* row = w2 + (static_cast<int64_t>(ids[slot]) * hidden + h) * inter;
    float acc = 0.0f;
    for (int64_t n = 0; n < inter; ++n) acc += a[n] * __bfloat162float(row[n]);
    y[i] = acc;
  }
}

__global__ void combine_kernel(const float* y, const float* weights, float* out, int64_t tokens, int64_t k,
                               int64_t hidden) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * hidden; i += stride) {
    const int64_t t = i / hidden, h = i % hidden;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) acc += y[(t * k + j) * hidden + h] * weights[t * k + j];
    out[i] = acc;
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
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w1 || !w2 || !w || !ids || !out || w2->ndim != 3 || ids->ndim != 2) return 1;
  const int64_t tokens = x->shape[0], hidden = x->shape[1], inter = w2->shape[2], k = ids->shape[1];
  const int64_t slots = tokens * k;
  if (slots == 0) return 0;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  float *act = nullptr, *y = nullptr;
  if (cudaMallocAsync(&act, static_cast<size_t>(slots * inter) * sizeof(float), stream) != cudaSuccess) return 2;
  if (cudaMallocAsync(&y, static_cast<size_t>(slots * hidden) * sizeof(float), stream) != cudaSuccess) {
    cudaFreeAsync(act, stream);
    return 2;
  }
  const auto* id = static_cast<const int32_t*>(ids->data);
  up_gate_kernel<<<grid_for(slots * inter), 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(x->data),
                                                              static_cast<const __nv_bfloat16*>(w1->data), id, act,
                                                              slots, k, hidden, inter);
  down_kernel<<<grid_for(slots * hidden), 256, 0, stream>>>(act, static_cast<const __nv_bfloat16*>(w2->data), id, y,
                                                            slots, hidden, inter);
  combine_kernel<<<grid_for(tokens * hidden), 256, 0, stream>>>(y, static_cast<const float*>(w->data),
                                                                static_cast<float*>(out->data), tokens, k, hidden);
  cudaFreeAsync(act, stream);
  cudaFreeAsync(y, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
