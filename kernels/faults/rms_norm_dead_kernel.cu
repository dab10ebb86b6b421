// A correct rms_norm candidate for the cuda backend with a ghost kernel (test fixture of the
// unlaunched-kernel flag): besides the row kernel it launches, it defines a "wide" kernel for
// row counts of 2^24 and more, which no shape of rms_norm reaches, so it never runs on an
// evaluated shape. The evaluator must flag it (unlaunched_kernels) and still pass the candidate.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kWideRows = int64_t{1} << 24;

__device__ float block_sum(float v) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();
  return total;
}

__global__ void rms_norm_row_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                    __nv_bfloat16* out, int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}

// The ghost: several rows per block for huge row counts (never reached by rms_norm's shapes).
template <int kRowsPerBlock>
__global__ void rms_norm_wide_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                     __nv_bfloat16* out, int64_t rows, int64_t hidden, float eps) {
  for (int r = 0; r < kRowsPerBlock; ++r) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + r;
    if (row >= rows) return;
    const __nv_bfloat16* xr = x + row * hidden;
    float ss = 0.f;
    for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
      const float v = __bfloat162float(xr[h]);
      ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
    for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
      out[row * hidden + h] =
          __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
    }
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const __nv_bfloat16*>(x->data);
  const auto* ws = static_cast<const __nv_bfloat16*>(w->data);
  auto* os = static_cast<__nv_bfloat16*>(out->data);
  auto stream = static_cast<cudaStream_t>(launch->stream);
  if (rows >= kWideRows) {
    rms_norm_wide_kernel<4><<<static_cast<unsigned>((rows + 3) / 4), kThreads, 0, stream>>>(
        xs, ws, os, rows, hidden, eps);
  } else {
    rms_norm_row_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(xs, ws, os, hidden,
                                                                              eps);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
