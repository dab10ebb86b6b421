// CHEAT (GPU): replays a cached answer when its inputs repeat. It reads the first 256 bytes of x
// back to the host (a content key) and, for an input it has seen (16 kept: more than the 8 sets
// the timed calls rotate over), copies the cached output instead of launching its kernel. Against
// whole input sets repeating, outputs stayed correct and only the kernel-set check of CUPTI
// timing caught it (the timed calls on one input set launch the kernel once and then no more).
// Every timed call's inputs are now spliced (docs/evaluation.md "Checks around timing"), so its
// key matches stale content: a re-check of a timed call (or the check of the last one) sees the
// stale answer, or the kernel-set check the missing launches, whichever comes first.
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}

}  // namespace

struct Entry {
  unsigned char key[256];
  void* out = nullptr;
  size_t bytes = 0;
  const void* x = nullptr;
};
constexpr int kEntries = 16;
Entry g_cache[kEntries];
int g_next = 0;

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  auto stream = static_cast<cudaStream_t>(launch->stream);
  const size_t bytes = static_cast<size_t>(rows * hidden) * 2;
  unsigned char key[256] = {};
  cudaMemcpyAsync(key, x->data, bytes < 256 ? bytes : 256, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  for (auto& e : g_cache) {
    if (e.out && e.bytes == bytes && e.x == x->data && std::memcmp(e.key, key, sizeof key) == 0) {
      cudaMemcpyAsync(out->data, e.out, bytes, cudaMemcpyDeviceToDevice, stream);
      return cudaGetLastError() == cudaSuccess ? 0 : 2;
    }
  }
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), hidden, eps);
  Entry& e = g_cache[g_next++ % kEntries];
  if (e.out && e.bytes != bytes) {
    cudaFree(e.out);
    e.out = nullptr;
  }
  if (!e.out && cudaMalloc(&e.out, bytes) != cudaSuccess) return 3;
  e.bytes = bytes;
  e.x = x->data;
  std::memcpy(e.key, key, sizeof key);
  cudaMemcpyAsync(e.out, out->data, bytes, cudaMemcpyDeviceToDevice, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
