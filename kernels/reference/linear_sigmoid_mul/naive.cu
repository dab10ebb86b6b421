// Reference re-expressed as a cuda candidate: linear_sigmoid_mul (16x16 shared-memory tiled GEMM,
// fp32 accumulation, fused epilogue).
// gate = bf16(hidden_states [T, H] @ weight [N, H]^T + bias); out = bf16(sigmoid(gate) *
// post_mul_mat).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kTile = 16;

// Block (tx, ty) computes out[t0 + ty][n0 + tx]; tiles of x and w along k are staged in shared
// memory, zero-filled past the edges.
__global__ void linear_sigmoid_mul_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                          const __nv_bfloat16* b, const __nv_bfloat16* post,
                                          __nv_bfloat16* out, int64_t tokens, int64_t hidden,
                                          int64_t n_out) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int64_t t = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const int64_t w_row =
      static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.y;  // weight row loaded by this thread
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < hidden; k0 += kTile) {
    const int64_t k = k0 + threadIdx.x;
    xs[threadIdx.y][threadIdx.x] =
        (t < tokens && k < hidden) ? __bfloat162float(x[t * hidden + k]) : 0.0f;
    ws[threadIdx.y][threadIdx.x] =
        (w_row < n_out && k < hidden) ? __bfloat162float(w[w_row * hidden + k]) : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) acc += xs[threadIdx.y][kk] * ws[threadIdx.x][kk];
    __syncthreads();
  }
  if (t < tokens && n < n_out) {
    const float gate = __bfloat162float(__float2bfloat16_rn(acc + __bfloat162float(b[n])));
    const float sig = 1.0f / (1.0f + expf(-gate));
    out[t * n_out + n] = __float2bfloat16_rn(sig * __bfloat162float(post[t * n_out + n]));
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "hidden_states");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* b = atrex_input(launch, "bias");
  const DLTensor* post = atrex_input(launch, "post_mul_mat");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !b || !post || !out || x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1])
    return 1;
  const int64_t tokens = x->shape[0], hidden = x->shape[1], n_out = w->shape[0];
  if (tokens == 0 || n_out == 0) return 0;
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((n_out + kTile - 1) / kTile),
                  static_cast<unsigned>((tokens + kTile - 1) / kTile));
  linear_sigmoid_mul_kernel<<<grid, block, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<const __nv_bfloat16*>(b->data), static_cast<const __nv_bfloat16*>(post->data),
      static_cast<__nv_bfloat16*>(out->data), tokens, hidden, n_out);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
